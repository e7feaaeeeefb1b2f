// large_test.cc: sizes that break 32-bit or grid-y assumptions: L = 32768, B * H > 65535, and a
// query/output tensor of more than 2^31 elements. Long problems are checked on sampled rows
// against reference_rows(), within fixed tolerances (eager would need O(L^2) memory).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "common/convert.h"
#include "cuda_case.h"
#include "fill.h"

namespace tileattn::cuda_test {
namespace {

// Sampled-row tolerances: a few output ulps of bf16 at |O| <= 1, and fp32-level LSE.
constexpr double kBf16OutTol = 1.0 / 128;
constexpr double kLseTol = 1e-3;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

class LongSequence : public ::testing::TestWithParam<bool> {};

TEST_P(LongSequence, SampledRowsMatchOracle) {
  SKIP_WITHOUT_GPU();
  const bool causal = GetParam();
  const int64_t L = 32768, Hq = 2, Hkv = 1, D = 128;
  std::mt19937_64 rng(causal ? 11 : 12);
  HostTensor q = HostTensor::contiguous(DType::kBFloat16, {1, L, Hq, D}),
             k = HostTensor::contiguous(DType::kBFloat16, {1, L, Hkv, D}),
             v = HostTensor::contiguous(DType::kBFloat16, {1, L, Hkv, D});
  q.fill_normal(rng, 1.2);
  k.fill_normal(rng, 0.6);
  v.fill_normal(rng, 0.6);
  HostTensor out = HostTensor::contiguous(DType::kBFloat16, {1, L, Hq, D}),
             lse = HostTensor::contiguous(DType::kFloat32, {1, Hq, L});
  out.poison();
  lse.poison();
  Options opt;
  opt.causal = causal;
  {
    const DeviceCopy dq(q), dk(k), dv(v), dout(out), dlse(lse);
    const TensorRef d_lse = dlse.ref();
    forward(dq.ref(), dk.ref(), dv.ref(), dout.ref(), &d_lse, opt);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dout.to_host(out);
    dlse.to_host(lse);
  }

  // Every row written (and finite: every row sees at least one key here).
  int64_t bad = 0;
  for (int64_t i = 0; i < L; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      bad += !std::isfinite(lse.get({0, h, i, 0}));
      for (int64_t d = 0; d < D; ++d) bad += !std::isfinite(out.get({0, i, h, d}));
    }
  EXPECT_EQ(bad, 0);

  HostTensor ref_out = HostTensor::contiguous(DType::kFloat64, {1, L, Hq, D}),
             ref_lse = HostTensor::contiguous(DType::kFloat64, {1, Hq, L});
  const TensorRef r_lse = ref_lse.ref();
  const std::pair<int64_t, int64_t> ranges[] = {{0, 64}, {16000, 16064}, {L - 64, L}};
  double err_out = 0, err_lse = 0;
  for (auto [r0, r1] : ranges) {
    reference_rows(q.ref(), k.ref(), v.ref(), ref_out.ref(), &r_lse, opt, r0, r1);
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        err_lse = std::max(err_lse, std::abs(lse.get({0, h, i, 0}) - ref_lse.get({0, h, i, 0})));
        for (int64_t d = 0; d < D; ++d)
          err_out = std::max(err_out, std::abs(out.get({0, i, h, d}) - ref_out.get({0, i, h, d})));
      }
  }
  EXPECT_LE(err_out, kBf16OutTol);
  EXPECT_LE(err_lse, kLseTol);
  RecordProperty("err_out", std::to_string(err_out));
  std::printf("L=%lld causal=%d: sampled O err %.3g, LSE err %.3g\n", static_cast<long long>(L), causal,
              err_out, err_lse);
}

INSTANTIATE_TEST_SUITE_P(Large, LongSequence, ::testing::Values(false, true));

// More (batch, head) pairs than gridDim.y/z could hold.
TEST(Large, ManyHeads) {
  SKIP_WITHOUT_GPU();
  Problem p;
  p.dtype = DType::kBFloat16;
  p.batch = 3;
  p.heads_q = 22000;  // B * Hq = 66000 > 65535
  p.heads_kv = 11000;
  p.seqlen_q = 5;
  p.seqlen_k = 9;
  p.head_dim = 64;
  p.options.causal = true;
  const Report r = run_case(p);
  EXPECT_TRUE(r.ok()) << r.str();
}

// q and out of [1, Lq, 16, 128] with Lq * 2048 > 2^31 elements: rows past element 2^31 are read
// and written through 64-bit offsets. Inputs are filled on the device by an index hash, so any
// row of q can be rebuilt on the host; sampled rows go through the oracle as a small problem
// (no mask, so each row is independent of the others).
TEST(Large, TensorPast2To31Elements) {
  SKIP_WITHOUT_GPU();
  const int64_t Lq = (int64_t{1} << 20) + 64, Hq = 16, D = 128, Lk = 128, Hkv = 2;
  const int64_t n_q = Lq * Hq * D;
  ASSERT_GT(n_q, int64_t{1} << 31);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (free_bytes < static_cast<size_t>(2 * n_q * 2 + (int64_t{1} << 30)))
    GTEST_SKIP() << "needs ~9 GB of GPU memory";

  void *dq = nullptr, *dout = nullptr;
  float* dlse = nullptr;
  ASSERT_EQ(cudaMalloc(&dq, n_q * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, n_q * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dlse, Hq * Lq * sizeof(float)), cudaSuccess);
  const uint64_t seed = 99;
  fill_hash_bf16(dq, n_q, seed);
  ASSERT_EQ(cudaMemset(dout, 0xff, n_q * 2), cudaSuccess);  // NaN poison
  ASSERT_EQ(cudaMemset(dlse, 0xff, Hq * Lq * sizeof(float)), cudaSuccess);

  std::mt19937_64 rng(5);
  HostTensor k = HostTensor::contiguous(DType::kBFloat16, {1, Lk, Hkv, D}),
             v = HostTensor::contiguous(DType::kBFloat16, {1, Lk, Hkv, D});
  k.fill_normal(rng, 0.6);
  v.fill_normal(rng, 0.6);
  const DeviceCopy dk(k), dv(v);
  const TensorRef q_ref = TensorRef::contiguous(dq, DType::kBFloat16, {1, Lq, Hq, D}, Device::cuda(0));
  const TensorRef out_ref = TensorRef::contiguous(dout, DType::kBFloat16, {1, Lq, Hq, D}, Device::cuda(0));
  const TensorRef lse_ref = TensorRef::contiguous(dlse, DType::kFloat32, {1, Hq, Lq}, Device::cuda(0));
  forward(q_ref, dk.ref(), dv.ref(), out_ref, &lse_ref);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(count_nan_bf16(dout, n_q), 0) << "output elements left unwritten";
  EXPECT_EQ(count_nan32(dlse, Hq * Lq), 0) << "LSE elements left unwritten";

  const std::pair<int64_t, int64_t> ranges[] = {{0, 64},
                                                {(int64_t{1} << 20) - 40, Lq}};  // row 2^20 starts at 2^31
  double err_out = 0, err_lse = 0;
  for (auto [r0, r1] : ranges) {
    const int64_t n = r1 - r0;
    HostTensor q_rows = HostTensor::contiguous(DType::kBFloat16, {1, n, Hq, D});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t idx = ((r0 + i) * Hq + h) * D + d;
          q_rows.set({0, i, h, d}, detail::bf16_to_float(detail::float_to_bf16(hash_unit(idx, seed))));
        }
    std::vector<uint16_t> got(n * Hq * D);
    ASSERT_EQ(cudaMemcpy(got.data(), static_cast<uint16_t*>(dout) + r0 * Hq * D, got.size() * 2,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<float> got_lse(Hq * n);
    for (int64_t h = 0; h < Hq; ++h)
      ASSERT_EQ(
          cudaMemcpy(got_lse.data() + h * n, dlse + h * Lq + r0, n * sizeof(float), cudaMemcpyDeviceToHost),
          cudaSuccess);
    HostTensor ref_out = HostTensor::contiguous(DType::kFloat64, {1, n, Hq, D}),
               ref_lse = HostTensor::contiguous(DType::kFloat64, {1, Hq, n});
    const TensorRef r_lse = ref_lse.ref();
    reference(q_rows.ref(), k.ref(), v.ref(), ref_out.ref(), &r_lse);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        err_lse = std::max(err_lse, std::abs(got_lse[h * n + i] - ref_lse.get({0, h, i, 0})));
        for (int64_t d = 0; d < D; ++d)
          err_out = std::max(err_out, std::abs(detail::bf16_to_float(got[(i * Hq + h) * D + d]) -
                                               ref_out.get({0, i, h, d})));
      }
  }
  EXPECT_LE(err_out, kBf16OutTol);
  EXPECT_LE(err_lse, kLseTol);
  std::printf("2^31+ elements: sampled O err %.3g, LSE err %.3g\n", err_out, err_lse);
  cudaFree(dq);
  cudaFree(dout);
  cudaFree(dlse);
}

}  // namespace
}  // namespace tileattn::cuda_test
