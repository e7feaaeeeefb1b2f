// backward_test.cc: the CUDA backward (sm80 kernels; on Hopper also the sm90 kernel, asked for
// with Kernel::kCudaSm90) against the fp64 oracle with eager's error on the CPU as the
// yardstick, through the CPU suite's harness (backward_util.h): head dims of every compiled
// kernel and padded ones, masks, softcap, GQA, off-grid lengths, varlen batches with seqused
// (checked mode), the LSE's gradient, NaN, determinism over runs, bad arguments.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backward_util.h"
#include "cuda/cuda_api.h"
#include "cuda/sm80/bwd_params.h"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_order.h"
#include "cuda_case.h"

namespace tileattn::cuda_test {
namespace {

using test::BackwardCase;
using test::Grads;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

Problem make(int64_t b, int64_t lq, int64_t lk, int64_t hq, int64_t hkv, int64_t d, DType dtype) {
  Problem p;
  p.batch = b, p.seqlen_q = lq, p.seqlen_k = lk, p.heads_q = hq, p.heads_kv = hkv, p.head_dim = d;
  p.dtype = dtype;
  return p;
}

std::vector<Problem> dense_cases() {
  std::vector<Problem> out;
  // The last three: D = 64 over several of the sm90 backward's 128-row query blocks, the last
  // one less and more than half full, GQA, Lk > Lq; D = 256 over several query and key blocks of
  // 64, both ragged, GQA.
  const struct {
    int64_t b, lq, lk, hq, hkv, d;
  } shapes[] = {{1, 1, 1, 2, 1, 64},      {2, 17, 63, 4, 2, 40},    {1, 65, 64, 2, 2, 64},
                {1, 113, 203, 8, 1, 128}, {1, 203, 113, 2, 1, 96},  {1, 257, 129, 6, 3, 128},
                {1, 130, 70, 2, 2, 256},  {1, 64, 200, 4, 4, 200},  {2, 1023, 1025, 2, 1, 128},
                {1, 300, 330, 4, 2, 64},  {2, 230, 1025, 4, 1, 64}, {2, 200, 150, 4, 2, 256}};
  for (const auto& s : shapes)
    for (DType dtype : {DType::kBFloat16, DType::kFloat16})
      for (int mask = 0; mask < 4; ++mask) {
        Problem p = make(s.b, s.lq, s.lk, s.hq, s.hkv, s.d, dtype);
        p.options.kernel = Kernel::kCudaSm80;  // on Hopper the default takes sm90 at D = 128
        if (mask == 1) p.options.causal = true;
        if (mask == 2) p.options.window_left = 40, p.options.window_right = 7;
        if (mask == 3) p.options.softcap = 15.0f, p.options.causal = true;
        out.push_back(p);
      }
  Problem strided = make(2, 70, 90, 4, 2, 64, DType::kBFloat16);
  strided.q_layout = strided.kv_layout = strided.out_layout = test::Layout::kBHLD;
  out.push_back(strided);
  return out;
}

class CudaBackward : public testing::TestWithParam<Problem> {};
TEST_P(CudaBackward, MatchesOracle) {
  SKIP_WITHOUT_GPU();
  test::check_backward(GetParam(), false, gpu_backward);
}
INSTANTIATE_TEST_SUITE_P(Dense, CudaBackward, testing::ValuesIn(dense_cases()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

TEST(CudaBackwardVarlen, MatchesOracleWithSequsedAndLseGradient) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {64, 128}) {
    Problem base = make(1, 0, 0, 4, 2, d, DType::kBFloat16);
    base.options.causal = true;
    Problem p = test::varlen_problem(base, {17, 0, 113, 1, 300}, {113, 5, 17, 700, 300});
    p.used_q = {17, 0, 100, 1, 300}, p.used_k = {100, 5, 17, 700, 299};
    test::check_backward(p, true, gpu_backward);
    Problem dense = make(3, 150, 260, 4, 1, d, DType::kFloat16);
    dense.used_q = {150, 1, 77}, dense.used_k = {260, 0, 100};
    dense.options.window_left = 50;
    test::check_backward(dense, false, gpu_backward);
  }
}

TEST(CudaBackward, GradientOfTheLse) {
  SKIP_WITHOUT_GPU();
  Problem p = make(2, 100, 160, 4, 2, 64, DType::kBFloat16);
  p.options.causal = true;
  test::check_backward(p, true, gpu_backward);
}

TEST(CudaBackward, NanReachesOnlyWhatSeesIt) {
  SKIP_WITHOUT_GPU();
  Problem p = make(1, 300, 300, 2, 1, 64, DType::kBFloat16);
  p.options.causal = true;
  BackwardCase bc(p);
  bc.c.k.set({0, 200, 0, 3}, std::numeric_limits<double>::quiet_NaN());  // rows < 200 do not see key 200
  bc.fwd = test::run_forward(bc.c);
  std::vector<std::pair<Kernel, int>> kernels = {{Kernel::kCudaSm80, detail::sm80::BwdTiles::kBlockM}};
  if (sm90_available()) kernels.push_back({Kernel::kCudaSm90, detail::sm90::bwd_block_m(64, true)});
  for (const auto& [kernel, block_m] : kernels) {
    Options o = p.options;
    o.kernel = kernel;
    const Grads g = gpu_backward(bc, o);
    // Query blocks before key 200's block never meet it; rows of the block holding row 200 that
    // precede it may get NaN through 0 x NaN in dS K (bwd_kernel.cuh); rows that see it do.
    const int64_t clean = 200 / block_m * block_m;
    ASSERT_GT(clean, 0);
    for (int64_t i = 0; i < clean; ++i)
      for (int64_t d = 0; d < 64; ++d)
        ASSERT_TRUE(std::isfinite(g.dq.get({0, i, 0, d}))) << i << " " << block_m;
    EXPECT_TRUE(std::isnan(g.dq.get({0, 250, 1, 0}))) << block_m;
  }
}

// The sm80 kernels sum every gradient in a fixed order: the same bits over 1000 runs at
// flash-attn's race-condition shape (batch 60).
TEST(CudaBackward, SameBitsEveryRun) {
  SKIP_WITHOUT_GPU();
  Problem p = make(60, 200, 200, 4, 2, 64, DType::kBFloat16);
  p.options.causal = true;
  p.options.kernel = Kernel::kCudaSm80;  // on Hopper the default takes sm90 at D = 64 (its own test)
  const BackwardCase bc(p);
  Options o = p.options;
  o.deterministic = true;
  const Grads first = gpu_backward(bc, o);
  EXPECT_TRUE(
      test::same_bits(gpu_backward(bc, p.options), first));  // deterministic or not: one order either way
  int64_t differing = 0;                                     // 1000 runs into the same device buffers
  gpu_backward_runs(bc, o, 1000, [&](int run, const Grads& again) {
    if (!test::same_bits(again, first) && differing++ == 0) ADD_FAILURE() << "run " << run << " differs";
  });
  EXPECT_EQ(differing, 0);
}

TEST(CudaBackward, BadArgumentsNameThemselves) {
  SKIP_WITHOUT_GPU();
  Problem p = make(1, 20, 20, 2, 1, 64, DType::kBFloat16);
  const BackwardCase bc(p);
  Grads g = test::fresh_grads(p, p.dtype);
  const DeviceCopy dout(bc.dout), q(bc.c.q), k(bc.c.k), v(bc.c.v), out(bc.fwd.out), lse(bc.fwd.lse), dq(g.dq),
      dk(g.dk), dv(g.dv);
  TensorRef bad = dq.ref();
  bad.data = static_cast<char*>(bad.data) + 2;  // not 16-byte aligned
  try {
    backward(dout.ref(), q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), bad, dk.ref(), dv.ref());
    ADD_FAILURE() << "accepted a misaligned dq";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dq") << e.what();
  }
  TensorRef host_dq = g.dq.ref();  // a CPU gradient for CUDA inputs
  try {
    backward(dout.ref(), q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), host_dq, dk.ref(), dv.ref());
    ADD_FAILURE() << "accepted a CPU dq";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dq") << e.what();
  }
}

// The sm90 backward on the dense cases of the head dims it has (64, 128, 256), each with its LSE
// gradient too; it is asked for, so a quiet fall back to sm80 cannot pass for it.
std::vector<Problem> sm90_cases() {
  std::vector<Problem> out;
  for (Problem p : dense_cases())
    if (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) {
      p.options.kernel = Kernel::kCudaSm90;
      out.push_back(p);
    }
  for (int64_t d : {64, 128, 256}) {  // a negative scale (the scores' transform negates them)
    Problem p = make(1, 100, 140, 4, 2, d, DType::kBFloat16);
    p.options.kernel = Kernel::kCudaSm90;
    p.options.scale = -0.05f;
    p.options.causal = true;
    out.push_back(p);
  }
  return out;
}

class CudaBackwardSm90 : public testing::TestWithParam<Problem> {};
TEST_P(CudaBackwardSm90, MatchesOracle) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  test::check_backward(GetParam(), false, gpu_backward);
  test::check_backward(GetParam(), true, gpu_backward);
}
INSTANTIATE_TEST_SUITE_P(Dense, CudaBackwardSm90, testing::ValuesIn(sm90_cases()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

// By default, on Hopper, deterministic mode runs the sm90 backward at head dims 64, 128 and 256
// (the same bits as asking for it), dense and packed. SupportedBackwardNamesTheKernel covers the other mode;
// the rule itself is tested by Select.Sm90BackwardPreferredWhereverItRuns.
TEST(CudaBackwardSm90, IsTheDefaultWhereMeasuredAhead) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  for (int64_t d : {64, 128, 256})
    for (bool packed : {false, true}) {
      Problem p = make(2, 150, 260, 4, 2, d, DType::kBFloat16);
      if (packed)
        p = test::varlen_problem(make(1, 0, 0, 4, 2, d, DType::kBFloat16), {150, 0, 97}, {260, 5, 97});
      p.options.causal = true;
      p.options.deterministic = true;
      const BackwardCase bc(p);
      const Grads by_default = gpu_backward(bc, p.options);
      Options o = p.options;
      o.kernel = Kernel::kCudaSm90;
      EXPECT_TRUE(test::same_bits(gpu_backward(bc, o), by_default)) << "D " << d << " packed " << packed;
    }
}

// Deterministic mode orders the fp32 dQ additions by key block: the same bits over 1000 runs at
// batch 60 (flash-attn's race-condition shape). Without it the additions race, and the results
// stay within fp32 rounding of the deterministic ones.
TEST(CudaBackwardSm90, SameBitsEveryRunWhenDeterministic) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  for (int64_t d : {64, 128, 256}) {
    Problem p = make(60, 200, 300, 4, 2, d, DType::kBFloat16);
    p.options.causal = true;
    p.options.kernel = Kernel::kCudaSm90;
    const BackwardCase bc(p);
    Options o = p.options;
    o.deterministic = true;
    const Grads first = gpu_backward(bc, o);
    int64_t differing = 0;  // one device setup, 1000 runs into the same buffers
    gpu_backward_runs(bc, o, 1000, [&](int run, const Grads& again) {
      if (!test::same_bits(again, first) && differing++ == 0)
        ADD_FAILURE() << "D " << d << " run " << run << " differs";
    });
    EXPECT_EQ(differing, 0) << "D " << d;
    const Grads racing = gpu_backward(bc, p.options);
    EXPECT_TRUE(racing.dk.bytes() == first.dk.bytes() && racing.dv.bytes() == first.dv.bytes());
    double worst = 0, scale = 0;
    first.dq.for_each([&](const test::Index& i) {
      worst = std::max(worst, std::abs(racing.dq.get(i) - first.dq.get(i)));
      scale = std::max(scale, std::abs(first.dq.get(i)));
    });
    EXPECT_LE(worst, 1e-2 * scale) << "D " << d;  // one bf16 rounding of sums that differ in fp32 order
  }
}

// With a cap on the sm90 backward's fp32 dQ sums (set_sm90_backward_dq_cap) the KV heads go in
// groups, a launch and a conversion each (cuda/backward.cc): the same bits as one launch in
// deterministic mode, for groups of one KV head and of three (4 KV heads: 3 + 1), dense and packed.
TEST(CudaBackwardSm90, KvHeadGroupsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  struct Reset {
    int64_t cap = detail::cuda::set_sm90_backward_dq_cap(0);  // one launch: the reference
    ~Reset() { detail::cuda::set_sm90_backward_dq_cap(cap); }
  } reset;
  for (int64_t d : {64, 128, 256}) {
    for (bool packed : {false, true}) {
      Problem p = make(2, 150, 260, 8, 4, d, DType::kBFloat16);
      if (packed)
        p = test::varlen_problem(make(1, 0, 0, 8, 4, d, DType::kBFloat16), {150, 0, 97}, {260, 5, 97});
      p.options.causal = true;
      p.options.deterministic = true;
      p.options.kernel = Kernel::kCudaSm90;
      const BackwardCase bc(p);
      const Grads whole = gpu_backward(bc, p.options);
      // One KV head's sums: 2 query heads x its dQ tiles (bwd_layout.h: DqTiles) x block_m x D floats.
      const int bm = detail::sm90::bwd_block_m(d, /*window=*/true);  // causal: window_right 0
      static const int32_t cu_q[] = {0, 150, 150, 247};  // the packed sequences' rows (non-null: packed)
      const detail::sm90::DqTiles tiles =
          detail::sm90::DqTiles::make(packed ? cu_q : nullptr, packed ? 3 : 2, (150 + bm - 1) / bm, 247, bm);
      const int64_t per_kv_head = 2 * tiles.head_blocks * bm * d * 4;
      for (int64_t heads : {1, 3}) {
        const int64_t cap = heads == 1 ? 1 : heads * per_kv_head;
        ASSERT_EQ(detail::sm90::dq_group_heads(cap, per_kv_head / 4, 4), heads);
        detail::cuda::set_sm90_backward_dq_cap(cap);
        EXPECT_TRUE(test::same_bits(gpu_backward(bc, p.options), whole))
            << "D " << d << (packed ? " packed" : " dense") << ", " << heads << " KV heads a launch";
      }
      detail::cuda::set_sm90_backward_dq_cap(0);
    }
  }
}

// Deterministic mode without a mask interleaves the key blocks of several (batch, KV head) pairs in
// the launch order under an L2 budget (set_sm90_backward_det_budget; bwd_order.h:
// det_pair_group_log2, grouped_tile): the same bits as the plain order, for groups of 2, 4 and 8
// of 16 pairs and of 8 (one group holding every pair: a grid of one row), dense and packed.
TEST(CudaBackwardSm90, PairGroupsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  struct Reset {
    int64_t budget = detail::cuda::set_sm90_backward_det_budget(0);  // the plain order: the reference
    ~Reset() { detail::cuda::set_sm90_backward_det_budget(budget); }
  } reset;
  for (int64_t batch : {4, 2})
    for (int64_t d : {64, 128, 256})
      for (bool packed : {false, true}) {
        Problem p = make(batch, 150, 390, 8, 4, d, DType::kBFloat16);
        if (packed)
          p = batch == 4
                  ? test::varlen_problem(make(1, 0, 0, 8, 4, d, DType::kBFloat16), {150, 0, 97, 33},
                                         {390, 5, 260, 70})
                  : test::varlen_problem(make(1, 0, 0, 8, 4, d, DType::kBFloat16), {150, 97}, {390, 260});
        p.options.deterministic = true;
        p.options.kernel = Kernel::kCudaSm90;
        const BackwardCase bc(p);
        const Grads plain = gpu_backward(bc, p.options);
        const int64_t pairs = batch * 4,
                      pair_bytes = 2 * 150 * d * 8;  // 2 query heads' rows of Q, dO, fp32 dQ
        for (int log2 : {1, 2, 3}) {
          ASSERT_EQ(detail::sm90::det_pair_group_log2(2 * 150, d, pairs, pair_bytes << log2), log2);
          detail::cuda::set_sm90_backward_det_budget(pair_bytes << log2);
          EXPECT_TRUE(test::same_bits(gpu_backward(bc, p.options), plain))
              << "D " << d << (packed ? " packed" : " dense") << ", " << (1 << log2) << " of " << pairs
              << " pairs interleaved";
        }
        detail::cuda::set_sm90_backward_det_budget(0);
      }
}

// Varlen and seqused batches on the sm90 backward (asked for; the default takes them too, but in
// deterministic mode at head dim 128, cuda_limits.cc): packed sequences whose last query and
// key blocks run into the next sequence, empty ones, rows past seqused holding NaN (the loader
// zeroes them in shared memory, bwd_loader.cuh), Lk > Lq, GQA, every mask; with and without the
// LSE's gradient. Then deterministic mode's bits over runs of a packed causal batch.
TEST(CudaBackwardSm90, VarlenAndSequsedMatchTheOracle) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  for (int64_t d : {64, 128, 256})
    for (DType dtype : {DType::kBFloat16, DType::kFloat16})
      for (int mask = 0; mask < 3; ++mask) {
        Problem base = make(1, 0, 0, 4, 2, d, dtype);
        base.options.kernel = Kernel::kCudaSm90;
        if (mask == 1) base.options.causal = true;
        if (mask == 2) base.options.window_left = 50, base.options.window_right = 9;
        Problem p = test::varlen_problem(base, {17, 0, 113, 1, 300, 129}, {113, 5, 17, 700, 300, 0});
        test::check_backward(p, false, gpu_backward);
        p.used_q = {17, 0, 100, 1, 250, 129}, p.used_k = {100, 5, 17, 640, 299, 0};
        test::check_backward(p, true, gpu_backward);
        Problem dense = make(3, 150, 260, 4, 1, d, dtype);
        dense.options = base.options;
        dense.used_q = {150, 1, 77}, dense.used_k = {260, 0, 100};
        test::check_backward(dense, false, gpu_backward);
        Problem mixed = p;  // a packed q against a dense k (each side's map and batch coordinate)
        mixed.packed_k = false, mixed.seqlen_k = 300, mixed.lens_k.clear(),
        mixed.used_k = {300, 5, 0, 1, 299, 160};
        test::check_backward(mixed, false, gpu_backward);
      }
  Problem p = test::varlen_problem(make(1, 0, 0, 4, 2, 128, DType::kBFloat16), {200, 65, 0, 300, 129},
                                   {300, 65, 7, 129, 200});
  p.options.causal = true;
  p.options.kernel = Kernel::kCudaSm90;
  p.options.deterministic = true;
  test::check_backward(p, true, gpu_backward);
  const BackwardCase bc(p);
  const Grads first = gpu_backward(bc, p.options);
  int64_t differing = 0;
  gpu_backward_runs(bc, p.options, 50, [&](int run, const Grads& again) {
    if (!test::same_bits(again, first) && differing++ == 0) ADD_FAILURE() << "run " << run << " differs";
  });
  EXPECT_EQ(differing, 0);
}

// What the sm90 backward does not take, asked for, names itself: a head dim it has no kernel for.
TEST(CudaBackwardSm90, NamesWhatItDoesNotTake) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  Problem p = make(1, 20, 20, 2, 1, 96, DType::kBFloat16);
  p.options.kernel = Kernel::kCudaSm90;
  try {
    gpu_backward(BackwardCase(p), p.options);
    ADD_FAILURE() << "accepted head_dim 96";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "q") << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim 96"), std::string::npos) << e.what();
  }
}

// supported_backward names the kernel backward() runs: on Hopper sm90 at head dims 64, 128 and 256
// (without deterministic mode), else sm80; what it does not take names the argument, as backward() would.
TEST(CudaBackward, SupportedBackwardNamesTheKernel) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {64, 128, 256}) {
    Problem p = make(1, 100, 100, 2, 1, d, DType::kBFloat16);
    const BackwardCase bc(p);
    Grads g = test::fresh_grads(p, p.dtype);
    const DeviceCopy dout(bc.dout), q(bc.c.q), k(bc.c.k), v(bc.c.v), out(bc.fwd.out), lse(bc.fwd.lse),
        dq(g.dq), dk(g.dk), dv(g.dv);
    const auto ask = [&](Kernel kernel) {
      Options o;
      o.kernel = kernel;
      return supported_backward(dout.ref(), q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), dq.ref(),
                                dk.ref(), dv.ref(), o);
    };
    const Support by_default = ask(Kernel::kAuto), sm80 = ask(Kernel::kCudaSm80),
                  sm90 = ask(Kernel::kCudaSm90);
    ASSERT_TRUE(by_default.ok && sm80.ok) << by_default.reason << " / " << sm80.reason;
    EXPECT_EQ(sm80.kernel, Kernel::kCudaSm80);
    EXPECT_EQ(by_default.kernel, sm90_available() ? Kernel::kCudaSm90 : Kernel::kCudaSm80) << d;
    EXPECT_EQ(sm90.ok, sm90_available()) << sm90.reason;
    if (sm90.ok) EXPECT_EQ(sm90.kernel, Kernel::kCudaSm90);
  }
}

}  // namespace
}  // namespace tileattn::cuda_test
