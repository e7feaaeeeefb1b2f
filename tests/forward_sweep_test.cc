// forward_sweep_test.cc: forward() against the fp64 oracle over sequence lengths, head dims,
// dtypes, masks, softcap, GQA and memory layouts, under err(ours) <= 2 * err(eager) + atol.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// fp32 is also held to absolute bounds: O and LSE accumulate in fp32 over at most ~1000 keys,
// which costs a few units of fp32 rounding (6e-8) per key in the worst case, far under these.
constexpr double kFp32OutMax = 1e-5;
constexpr double kFp32LseMax = 1e-5;  // relative to max(1, |LSE|)

// Runs forward and eager on one problem and applies every check of the accuracy rule.
void check_against_oracle(const Problem& p) {
  Case c(p, rng_for(p.name())());
  c.run_oracle();
  ASSERT_EQ(c.ref_out.count_unwritten(), 0);

  const Result ours = run_forward(c);
  expect_written(ours, "forward");
  expect_empty_rows_exact(ours, c);
  const Result base = run_eager(c);
  expect_written(base, "eager");

  const Errors e = measure(ours, c), b = measure(base, c);
  EXPECT_EQ(e.mismatches, 0) << "forward: " << e.first_mismatch;
  EXPECT_EQ(b.mismatches, 0) << "eager: " << b.first_mismatch;
  const Atol atol = atol_for(p.dtype);
  EXPECT_LE(e.out, 2 * b.out + atol.out) << "O error vs oracle; eager's is " << b.out;
  EXPECT_LE(e.lse, 2 * b.lse + atol.lse) << "LSE error vs oracle; eager's is " << b.lse;
  double lse_mag = 1.0;
  c.ref_lse.for_each([&](const Index& idx) {
    const double x = c.ref_lse.get(idx);
    if (std::isfinite(x)) lse_mag = std::max(lse_mag, std::abs(x));
  });
  // LSE is computed in fp32 from the inputs as given, for every dtype (only O is rounded to
  // fp16/bf16), so it is held to fp32 accuracy: eager's error, from S rounded to the dtype,
  // would be a thousand times looser.
  EXPECT_LE(e.lse, kFp32LseMax * lse_mag);
  if (p.dtype == DType::kFloat32) {
    // Logits (and their rounding errors) grow with the inputs' variance.
    const double spread = std::max(1.0, p.input_stddev * p.input_stddev);
    EXPECT_LE(e.out, kFp32OutMax * spread);
  }
  testing::Test::RecordProperty("err_out", testing::PrintToString(e.out));
  testing::Test::RecordProperty("err_lse", testing::PrintToString(e.lse));
  testing::Test::RecordProperty("eager_err_out", testing::PrintToString(b.out));
  testing::Test::RecordProperty("eager_err_lse", testing::PrintToString(b.lse));
}

std::string param_name(const testing::TestParamInfo<Problem>& info) { return info.param.name(); }

struct Shape {
  int64_t lq, lk, d, hq, hkv, batch;
};

Problem make(const Shape& s, DType dtype) {
  Problem p;
  p.seqlen_q = s.lq;
  p.seqlen_k = s.lk;
  p.head_dim = s.d;
  p.heads_q = s.hq;
  p.heads_kv = s.hkv;
  p.batch = s.batch;
  p.dtype = dtype;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Shapes: lengths on and off the 64-row tile grid, Lq < Lk and Lq > Lk, every head dim once or
// more, GQA ratios 1, 2, 4, 8; each without a mask and causal, in every dtype.

std::vector<Problem> shape_problems() {
  const Shape shapes[] = {
      {1, 1, 16, 1, 1, 1},       {1, 2, 32, 2, 1, 2},       {2, 17, 40, 4, 2, 1},
      {17, 2, 59, 8, 1, 1},      {17, 63, 64, 8, 8, 1},     {63, 17, 96, 2, 2, 2},
      {63, 64, 111, 4, 1, 1},    {64, 65, 128, 2, 1, 1},    {65, 64, 256, 2, 2, 1},
      {64, 113, 16, 8, 2, 1},    {113, 203, 59, 2, 1, 1},   {203, 113, 128, 1, 1, 2},
      {1, 1025, 96, 4, 4, 1},    {1025, 2, 40, 2, 2, 1},    {203, 1023, 111, 2, 1, 1},
      {1025, 1023, 64, 1, 1, 1}, {1023, 1025, 32, 2, 1, 1}, {17, 1025, 256, 2, 1, 1},
  };
  std::vector<Problem> out;
  for (const Shape& s : shapes)
    for (bool causal : {false, true})
      for (DType dtype : kDtypes) {
        Problem p = make(s, dtype);
        p.options.causal = causal;
        out.push_back(p);
      }
  return out;
}

class Shapes : public testing::TestWithParam<Problem> {};
TEST_P(Shapes, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, Shapes, testing::ValuesIn(shape_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// Sliding windows (left, right), -1 = unbounded, bottom-right aligned; with Lq > Lk and a
// bounded right edge the first rows see no key.

std::vector<Problem> window_problems() {
  const Shape shapes[] = {
      {113, 203, 64, 4, 2, 1}, {203, 113, 40, 2, 2, 1}, {64, 64, 32, 2, 1, 1}, {17, 63, 59, 1, 1, 2}};
  struct Window {
    bool causal;
    int64_t left, right;
  };
  const Window windows[] = {{false, 0, 0},     {false, 5, 0},   {false, 16, 3},
                            {false, -1, 7},    {false, 20, -1}, {false, 0, -1},
                            {false, 100, 100}, {true, 10, -1},  {true, -1, 0}};
  std::vector<Problem> out;
  for (const Shape& s : shapes)
    for (const Window& w : windows)
      for (DType dtype : kDtypes) {
        Problem p = make(s, dtype);
        p.options.causal = w.causal;
        p.options.window_left = w.left;
        p.options.window_right = w.right;
        out.push_back(p);
      }
  return out;
}

class Windows : public testing::TestWithParam<Problem> {};
TEST_P(Windows, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, Windows, testing::ValuesIn(window_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// Features: softcap, explicit scales, GQA/MQA with batches, and logits large enough that the
// row max keeps growing past the rescale threshold (both rescale policies).

std::vector<Problem> feature_problems() {
  std::vector<Problem> out;
  auto add = [&](Problem p) {
    for (DType dtype : kDtypes) {
      p.dtype = dtype;
      out.push_back(p);
    }
  };
  for (bool causal : {false, true}) {
    Problem p = make({113, 203, 64, 2, 1, 1}, DType::kFloat32);
    p.options.causal = causal;
    p.options.scale = 1.0f;
    p.options.softcap = 5.0f;  // logits ~ N(0, 64) are squashed hard
    add(p);
  }
  {
    Problem p = make({65, 64, 128, 2, 2, 1}, DType::kFloat32);
    p.options.softcap = 30.0f;
    p.input_stddev = 3.0;
    add(p);
  }
  for (float scale : {0.0f, 0.3f, -0.5f}) {
    Problem p = make({64, 65, 32, 2, 1, 1}, DType::kFloat32);
    p.options.scale = scale;
    add(p);
  }
  const std::pair<int64_t, int64_t> heads[] = {{3, 3}, {4, 2}, {16, 2}, {8, 1}, {6, 1}};
  for (size_t i = 0; i < std::size(heads); ++i) {
    Problem p = make({65, 113, 64, 0, 0, 2}, DType::kFloat32);
    p.heads_q = heads[i].first;
    p.heads_kv = heads[i].second;
    p.options.causal = i % 2 == 1;
    add(p);
  }
  for (Rescale rescale : {Rescale::kConditional, Rescale::kAlways}) {
    Problem p = make({203, 1023, 64, 1, 1, 1}, DType::kFloat32);
    p.input_stddev = 2.5;  // logits ~ N(0, 39): the running max jumps by more than 2^8 often
    p.options.rescale = rescale;
    add(p);
    p.options.causal = true;
    add(p);
  }
  return out;
}

class Features : public testing::TestWithParam<Problem> {};
TEST_P(Features, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, Features, testing::ValuesIn(feature_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// Memory layouts: [B, H, L, D] storage passed as permuted views, a head_dim stride of 2 with
// padding everywhere, padded rows, mixtures; LSE contiguous, padded or [B, L, H].

std::vector<Problem> layout_problems() {
  struct Layouts {
    Layout q, kv, out;
    LseLayout lse;
  };
  const Layouts layouts[] = {
      {Layout::kBHLD, Layout::kBHLD, Layout::kBHLD, LseLayout::kContiguous},
      {Layout::kStrided, Layout::kStrided, Layout::kStrided, LseLayout::kPadded},
      {Layout::kPadded, Layout::kPadded, Layout::kPadded, LseLayout::kBLH},
      {Layout::kBHLD, Layout::kStrided, Layout::kPadded, LseLayout::kBLH},
      {Layout::kStrided, Layout::kPadded, Layout::kBHLD, LseLayout::kPadded},
  };
  std::vector<Problem> out;
  for (size_t i = 0; i < std::size(layouts); ++i)
    for (DType dtype : kDtypes) {
      Problem p = make({113, 203, 59, 4, 2, 2}, dtype);
      p.q_layout = layouts[i].q;
      p.kv_layout = layouts[i].kv;
      p.out_layout = layouts[i].out;
      p.lse_layout = layouts[i].lse;
      p.options.causal = i % 2 == 0;
      out.push_back(p);
    }
  // A prefill-like problem as frameworks hold it: [B, H, L, D] storage, GQA, causal, Lq < Lk.
  for (DType dtype : kDtypes) {
    Problem p = make({300, 1023, 128, 8, 2, 2}, dtype);
    p.q_layout = p.kv_layout = p.out_layout = Layout::kBHLD;
    p.options.causal = true;
    out.push_back(p);
  }
  // Lq > Lk with causal: empty rows written through a strided view too.
  for (DType dtype : kDtypes) {
    Problem p = make({130, 64, 16, 2, 1, 1}, dtype);
    p.q_layout = p.kv_layout = p.out_layout = Layout::kStrided;
    p.lse_layout = LseLayout::kPadded;
    p.options.causal = true;
    out.push_back(p);
  }
  return out;
}

class Layouts : public testing::TestWithParam<Problem> {};
TEST_P(Layouts, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, Layouts, testing::ValuesIn(layout_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// Extreme head dims (1, 3 and the CPU limit 512) at small lengths.

std::vector<Problem> head_dim_problems() {
  std::vector<Problem> out;
  for (int64_t d : {1, 3, 512})
    for (Shape s : {Shape{17, 63, d, 2, 1, 1}, Shape{65, 2, d, 1, 1, 1}})
      for (DType dtype : kDtypes) {
        Problem p = make(s, dtype);
        p.options.causal = s.lq > s.lk;
        out.push_back(p);
      }
  return out;
}

class HeadDims : public testing::TestWithParam<Problem> {};
TEST_P(HeadDims, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, HeadDims, testing::ValuesIn(head_dim_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// Query tile sizes: the kernel picks 256, 128 or 64 rows per tile (128 at most for D > 256)
// from the problem and the thread count; each choice, with tiles cut short at the end.

std::vector<Problem> tile_problems() {
  // tile_config(D, Lq, batch * heads, threads) gives, for threads 1 / 3 / 8:
  //   Lq 1025, D 64, 1 head: 256 / 64 / 64;  Lq 513, D 32, 1 head: 128 / 64 / 64;
  //   Lq 300, D 320, 4 heads: 128 / 128 / 64 (D > 256 starts at 128).
  const Shape shapes[] = {{1025, 300, 64, 1, 1, 1}, {513, 513, 32, 1, 1, 1}, {300, 129, 320, 4, 1, 1}};
  struct Mask {
    bool causal;
    int64_t left;
  };
  std::vector<Problem> out;
  for (const Shape& s : shapes)
    for (Mask m : {Mask{false, -1}, Mask{true, -1}, Mask{false, 40}})
      for (int threads : {1, 3, 8})
        for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
          Problem p = make(s, dtype);
          p.options.causal = m.causal;
          p.options.window_left = m.left;
          p.options.num_threads = threads;
          out.push_back(p);
        }
  return out;
}

class TileSizes : public testing::TestWithParam<Problem> {};
TEST_P(TileSizes, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, TileSizes, testing::ValuesIn(tile_problems()), param_name);

// ---------------------------------------------------------------------------------------------
// A small subset that also runs once per lower SIMD level (see tests/CMakeLists.txt).

std::vector<Problem> isa_problems() {
  std::vector<Problem> out;
  for (DType dtype : kDtypes) {
    Problem a = make({65, 113, 59, 4, 2, 1}, dtype);
    a.options.causal = true;
    out.push_back(a);
    Problem b = make({64, 65, 128, 2, 1, 1}, dtype);
    b.q_layout = b.out_layout = Layout::kBHLD;
    out.push_back(b);
    Problem c = make({17, 203, 3, 1, 1, 1}, dtype);
    c.options.window_left = 5;
    c.options.window_right = 2;
    out.push_back(c);
    Problem d = make({113, 64, 40, 2, 2, 1}, dtype);
    d.options.causal = true;
    d.options.softcap = 2.0f;
    d.q_layout = d.kv_layout = d.out_layout = Layout::kStrided;
    out.push_back(d);
  }
  return out;
}

class IsaSubset : public testing::TestWithParam<Problem> {};
TEST_P(IsaSubset, MatchesOracle) {
  testing::Test::RecordProperty("cpu_isa", cpu_isa());
  check_against_oracle(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Forward, IsaSubset, testing::ValuesIn(isa_problems()), param_name);

}  // namespace
}  // namespace tileattn::test

namespace tileattn::test {
namespace {

// Decoding (at most 4 query rows): K and V read in place in address order over blocks every row
// sees whole (fp32, bf16), the per-row path for partly masked blocks and other dtypes; GQA
// groups (several rows a KV head), softcap, windows, key lengths off the block grid, forced
// and chosen key splits.
std::vector<Problem> decode_problems() {
  std::vector<Problem> out;
  const Shape shapes[] = {{1, 4225, 128, 8, 8, 2},
                          {4, 1025, 64, 8, 2, 1},
                          {3, 517, 128, 6, 1, 3},
                          {1, 17, 64, 32, 32, 1},
                          {2, 2049, 96, 4, 4, 1}};
  for (const Shape& s : shapes)
    for (DType dtype : kDtypes)
      for (int variant = 0; variant < 3; ++variant) {
        Problem p = make(s, dtype);
        p.options.causal = variant == 1;
        if (variant == 2) {
          p.options.softcap = 20.0f;
          p.options.window_left = 700;
          p.options.num_splits = 3;
        }
        out.push_back(p);
      }
  return out;
}

class Decode : public testing::TestWithParam<Problem> {};
TEST_P(Decode, MatchesOracle) { check_against_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Forward, Decode, testing::ValuesIn(decode_problems()), param_name);

}  // namespace
}  // namespace tileattn::test
