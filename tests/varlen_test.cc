// varlen_test.cc: forward_varlen and split-KV on the CPU against the fp64 oracle, sequence by
// sequence: packed batches with lengths off the tile grid (zero included), dense batches with
// seqused (the rest NaN, never read, never written), decode shapes, every split count.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

Problem base(DType dtype, int64_t hq = 4, int64_t hkv = 2, int64_t d = 32) {
  Problem p;
  p.dtype = dtype;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  return p;
}

void check(const Problem& p) {
  Case c(p, rng_for(p.name())());
  c.run_oracle();
  const Result r = run_forward(c);
  const Report rep = judge(r, c, DeviceKind::kCPU);
  EXPECT_TRUE(rep.ok()) << rep.str();
}

// Masks that matter per sequence: none, causal (bottom-right per sequence), a window, softcap.
void add_masks(std::vector<Problem>& out, Problem p) {
  for (int mask = 0; mask < 4; ++mask) {
    Problem m = p;
    if (mask == 1) m.options.causal = true;
    if (mask == 2) m.options.window_left = 20, m.options.window_right = 3;
    if (mask == 3) m.options.softcap = 10.0f, m.options.causal = true;
    out.push_back(m);
  }
}

std::vector<Problem> varlen_problems() {
  std::vector<Problem> out;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // Packed q and k, lengths off the grid, an empty sequence, Lq > Lk and Lq < Lk per sequence.
    add_masks(out, varlen_problem(base(dtype), {17, 0, 113, 1, 1023}, {113, 5, 17, 1023, 1}));
    // Packed, with seqused inside the packed lengths on both sides.
    Problem used = varlen_problem(base(dtype, 6, 3, 40), {65, 30, 129}, {64, 200, 7});
    used.used_q = {60, 0, 100};
    used.used_k = {64, 150, 1};
    add_masks(out, used);
    // Dense storage with seqused (a padded batch): rows past each length hold NaN.
    Problem dense = base(dtype, 4, 4, 24);
    dense.batch = 3, dense.seqlen_q = 70, dense.seqlen_k = 90;
    dense.used_q = {70, 1, 33};
    dense.used_k = {90, 17, 0};
    add_masks(out, dense);
    // Packed queries against a dense key cache with lengths (kv-cache-like), MQA.
    Problem cache = base(dtype, 8, 1, 64);
    cache.packed_q = true, cache.lens_q = {1, 16, 3}, cache.batch = 3, cache.seqlen_q = 16;
    cache.seqlen_k = 300, cache.used_k = {300, 1, 257};
    add_masks(out, cache);
  }
  return out;
}

class Varlen : public testing::TestWithParam<Problem> {};
TEST_P(Varlen, EachSequenceMatchesOracle) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cpu, Varlen, testing::ValuesIn(varlen_problems()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

// Split counts from one to more than there are key blocks (64 keys a block on the CPU), on
// decode shapes and on a causal prefill; the heuristic (0) too.
std::vector<Problem> split_problems() {
  std::vector<Problem> out;
  for (int splits : {0, 1, 2, 3, 17, 100, 256}) {
    Problem decode = base(DType::kFloat32, 8, 2, 64);
    decode.batch = 2, decode.seqlen_q = 1, decode.seqlen_k = 4225;
    decode.options.num_splits = splits;
    out.push_back(decode);
    Problem varlen = varlen_problem(base(DType::kBFloat16, 4, 1, 32), {1, 16, 0, 7}, {1023, 4225, 9, 1});
    varlen.options.num_splits = splits;
    varlen.options.causal = true;
    out.push_back(varlen);
    Problem prefill = base(DType::kFloat16, 2, 2, 48);
    prefill.seqlen_q = 203, prefill.seqlen_k = 1025;
    prefill.options.num_splits = splits;
    prefill.options.causal = true;
    prefill.options.window_left = 300;
    out.push_back(prefill);
  }
  return out;
}

class Splits : public testing::TestWithParam<Problem> {};
TEST_P(Splits, MatchOracle) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cpu, Splits, testing::ValuesIn(split_problems()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

TEST(Splits, SameBitsForAnyThreadCount) {
  Problem p = base(DType::kFloat32, 2, 1, 64);
  p.seqlen_q = 3, p.seqlen_k = 3000;  // decode-like: the heuristic splits
  Case c(p, 7);
  Options one = p.options;
  one.num_threads = 1;
  const Result first = run_forward(c, one);
  for (int threads : {2, 3, 5}) {
    Options o = p.options;
    o.num_threads = threads;
    EXPECT_TRUE(same_bits(first, run_forward(c, o))) << threads << " threads";
  }
}

TEST(Varlen, WithoutLseWritesOnlyOut) {
  Problem p = varlen_problem(base(DType::kFloat32), {5, 9}, {7, 3});
  p.with_lse = false;
  check(p);
}

TEST(Varlen, AllSequencesEmpty) {
  check(varlen_problem(base(DType::kFloat32), {0, 0}, {0, 4}));
  check(varlen_problem(base(DType::kFloat32), {3, 2}, {0, 0}));  // rows that see no key: 0, -inf
}

}  // namespace
}  // namespace tileattn::test
