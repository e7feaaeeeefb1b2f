// determinism_test.cc: forward() is bitwise reproducible across thread counts and repeated runs,
// and the SIMD level in use is the one TILEATTN_CPU_ISA asks for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>

#include "cpu/kv_pairs.h"
#include "simd/simd.h"
#include "test_util.h"

namespace tileattn::test {
namespace {

// "N of M O elements differ (max |diff| x), K of L LSE elements": for a failure message.
std::string describe_diff(const Result& a, const Result& b) {
  int64_t n_out = 0, n_lse = 0;
  double max_out = 0, max_lse = 0;
  a.out.for_each([&](const Index& idx) {
    const double x = a.out.get(idx), y = b.out.get(idx);
    if (std::memcmp(&x, &y, sizeof x) != 0) ++n_out, max_out = std::max(max_out, std::abs(x - y));
  });
  a.lse.for_each([&](const Index& idx) {
    const double x = a.lse.get(idx), y = b.lse.get(idx);
    if (std::memcmp(&x, &y, sizeof x) != 0) ++n_lse, max_lse = std::max(max_lse, std::abs(x - y));
  });
  std::ostringstream os;
  os << n_out << " of " << a.out.numel() << " O elements differ (max |diff| " << max_out << "), " << n_lse
     << " of " << a.lse.numel() << " LSE elements (max |diff| " << max_lse << ")";
  return os.str();
}

// c's forward at 1 thread, then at each of `threads`: the same bits every time (label names the
// case in a failure). Returns the 1-thread result.
Result same_bits_across_threads(const Case& c, const Options& options, std::initializer_list<int> threads,
                                const std::string& label) {
  Options one = options;
  one.num_threads = 1;
  const Result first = run_forward(c, one);
  for (int n : threads) {
    Options o = options;
    o.num_threads = n;
    const Result again = run_forward(c, o);
    EXPECT_TRUE(same_bits(first, again)) << label << ", " << n << " threads: " << describe_diff(first, again);
  }
  return first;
}

class Determinism : public testing::TestWithParam<Problem> {};

TEST_P(Determinism, BitwiseAcrossThreadCountsAndRuns) {
  const Problem& p = GetParam();
  Case c(p, rng_for(p.name())());
  Options one = p.options;
  one.num_threads = 1;
  const Result first = run_forward(c, one);
  expect_written(first, "1 thread");
  for (int threads : {1, 2, 3, 7, 0}) {
    Options o = p.options;
    o.num_threads = threads;
    for (int run = 0; run < 2; ++run) {
      const Result again = run_forward(c, o);
      EXPECT_TRUE(same_bits(first, again))
          << threads << " threads, run " << run << ": " << describe_diff(first, again);
    }
  }
}

std::vector<Problem> determinism_problems() {
  std::vector<Problem> out;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    Problem p;
    p.dtype = dtype;
    p.batch = 2;
    p.seqlen_q = 200;  // 4 query tiles, the last partial
    p.seqlen_k = 300;
    p.heads_q = 4;
    p.heads_kv = 2;
    p.head_dim = 72;
    out.push_back(p);
    p.options.causal = true;
    out.push_back(p);
    p.options.causal = false;
    p.options.window_left = 40;
    p.options.window_right = 9;
    p.options.softcap = 3.0f;
    p.out_layout = Layout::kStrided;
    out.push_back(p);
  }
  // One head, Lq = Lk = 512: the kernel may pick different query tiles for 1 and 7 threads;
  // a window's left edge clamped at key 0 then must not change which keys are summed together.
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Problem p;
    p.dtype = dtype;
    p.seqlen_q = p.seqlen_k = 512;
    p.head_dim = 64;
    p.options.window_left = 40;
    out.push_back(p);
    p.options.causal = true;
    out.push_back(p);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Forward, Determinism, testing::ValuesIn(determinism_problems()),
                         [](const testing::TestParamInfo<Problem>& info) { return info.param.name(); });

// A non-finite value of V in keys that some rows cannot see, Lk = Lq and Lk > Lq, causal: taller
// query tiles (fewer threads) cover keys past shorter tiles' last visible one. The bf16 path on
// AMX (cpu_forward.cc) must choose its way and its GEMM chunks by the key grid, not the tile: a
// row's bits are the same for any thread count (rows that see the inf are inf or NaN alike).
TEST(Determinism, NonFiniteValuesOutOfSomeRowsSight) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat32})
    for (int64_t lk : {512, 517}) {
      Problem p;
      p.dtype = dtype, p.seqlen_q = 512, p.seqlen_k = lk, p.heads_q = 2, p.heads_kv = 1, p.head_dim = 64;
      p.options.causal = true;
      Case c(p, 11);
      c.v.set({0, 220, 0, 5}, std::numeric_limits<double>::infinity());
      same_bits_across_threads(
          c, p.options, {2, 3, 7},
          std::string(dtype == DType::kFloat32 ? "fp32" : "bf16") + " Lk " + std::to_string(lk));
    }
}

// Decoding-sized problems (at most 4 query rows: scores as per-key dot products) and the next
// size up (the GEMM path) give the same bits for any thread count, causal, softcap and GQA too.
// Head dim 72 takes the copying decode path on AVX-512 (not a multiple of 16 floats), 128 the
// address-order one (K and V in place), with keys enough to split.
TEST(Determinism, FewRowProblemsAcrossThreadCounts) {
  for (int64_t d : {72, 128})
    for (DType dtype : {DType::kFloat32, DType::kBFloat16})
      for (int64_t rows : {1, 3, 4, 5}) {
        Problem p;
        p.batch = 3, p.seqlen_q = rows, p.seqlen_k = d == 128 ? 1500 : 333, p.heads_q = 6, p.heads_kv = 2;
        p.head_dim = d;
        p.dtype = dtype, p.options.softcap = 7.0f, p.options.causal = rows % 2 == 1;
        Case c(p, 7);
        const Result first = same_bits_across_threads(
            c, p.options, {2, 3}, "D " + std::to_string(d) + ", " + std::to_string(rows) + " rows");
        c.run_oracle();
        const Report r = judge(first, c, DeviceKind::kCPU);
        EXPECT_TRUE(r.ok()) << rows << " rows: " << r.str();
      }
}

// bf16 on AMX packs K and V once for all items where items would pack each block more than once
// (cpu/kv_pairs.h, PackedKv); the GEMMs read the same words from the copy, so the results are
// the same bits as with each item packing its own blocks (other dtypes and CPUs without AMX do
// not pack: both runs take the same path). Varlen batches with empty and odd
// sequences (no keys at all too), GQA, masks, a window over a short chunk of rows with splits,
// odd head dims, strided K and V (gathered), and a V holding an inf (on bf16 pairs its block
// goes row by row on fp32 weights).
TEST(Determinism, PackedKvSameBitsAsEachItemPacking) {
  std::vector<Problem> problems;
  Problem p;
  p.dtype = DType::kBFloat16, p.batch = 2, p.seqlen_q = 200, p.seqlen_k = 300, p.heads_q = 4, p.heads_kv = 2;
  p.head_dim = 72;
  problems.push_back(p);
  p.options.causal = true;
  problems.push_back(p);
  p.options.causal = false, p.options.window_left = 40, p.options.window_right = 9, p.options.softcap = 3.0f;
  p.kv_layout = Layout::kStrided;
  problems.push_back(p);
  Problem v = p;
  v.options = Options{}, v.options.causal = true, v.kv_layout = Layout::kContiguous, v.head_dim = 128;
  problems.push_back(varlen_problem(v, {0, 17, 600}, {5, 300, 517}));
  Problem w = problems[1];  // a window over a chunk of rows: only the blocks it reads are packed
  w.seqlen_q = 70, w.seqlen_k = 2000, w.options.window_left = 100, w.options.num_splits = 3;
  problems.push_back(w);
  Problem o = problems[0];  // odd head dim (not packed: no pairs), empty key sequences
  o.head_dim = 33;
  problems.push_back(varlen_problem(o, {40, 300, 9}, {0, 301, 1}));
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& q = problems[i];
    Case c(q, 21 + static_cast<int>(i));
    if (i == 0) c.v.set({1, 260, 1, 7}, std::numeric_limits<double>::infinity());
    const Result packed = run_forward(c, q.options);
    expect_written(packed, q.name().c_str());
    const int64_t limit = detail::cpu::PackedKv::set_max_bytes(0);
    const Result apart = run_forward(c, q.options);
    detail::cpu::PackedKv::set_max_bytes(limit);
    EXPECT_TRUE(same_bits(packed, apart)) << q.name() << ": " << describe_diff(packed, apart);
    if (i == 0) continue;  // the inf makes the oracle's rows that see it inf or NaN
    c.run_oracle();
    const Report r = judge(packed, c, DeviceKind::kCPU);
    EXPECT_TRUE(r.ok()) << q.name() << ": " << r.str();
  }
}

TEST(IsaLevel, HonorsEnvironmentCap) {
  const char* cap = std::getenv("TILEATTN_CPU_ISA");
  const std::string isa = cpu_isa();
  RecordProperty("cpu_isa", isa);
  EXPECT_TRUE(isa == "amx" || isa == "avx512bf16" || isa == "avx512" || isa == "avx2" || isa == "generic")
      << isa;
  if (cap && detail::simd_for(cap) != nullptr) {
    EXPECT_EQ(isa, cap);
  } else if (!cap) {
    // Uncapped: the best level this CPU runs.
    const char* best = detail::simd_for("amx")          ? "amx"
                       : detail::simd_for("avx512bf16") ? "avx512bf16"
                       : detail::simd_for("avx512")     ? "avx512"
                       : detail::simd_for("avx2")       ? "avx2"
                                                        : "generic";
    EXPECT_EQ(isa, best);
  }
}

}  // namespace
}  // namespace tileattn::test
