// tune_sm90_bwd [L...]: the sm90 backward at D = 128 with the library's one dS buffer against two
// (BwdSmem: a step then ends without its second named barrier), bf16, hidden 2048 (H = 16), B =
// 16384 / L, causal off and on (default L: 1024 4096 16384). Each variant runs the library's
// whole sm90 path (preprocessing, dQ sums zeroed, kernel, conversion: cuda/backward.cc), timed
// by CUDA events over 20 calls back to back after 3; TFLOP/s = 2.5 x 4 B H L^2 D (halved when
// causal), after a run of each in deterministic mode, whose dq, dk and dv must have the same
// bits (dS feeds only dQ, and deterministic mode orders dQ's additions: a dS race shows there).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/sm80/sm80.h"
#include "cuda/sm90/bwd_launch.cuh"
#include "fill.h"
#include "tileattn/tileattn.h"

namespace {

using namespace tileattn;
using namespace tileattn::detail;

#define CHECK(x)                                                   \
  do {                                                             \
    const cudaError_t err = (x);                                   \
    if (err != cudaSuccess) {                                      \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(err)); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

constexpr int64_t kD = 128;

struct Problem {
  int64_t B, L, H;
  bool causal;
  void *q, *k, *v, *dout, *out;
  float *lse, *rows, *accum;
  int* order;  // null: dQ's additions race (the default); else deterministic mode's counters
};

// The library's sm90 path for p with kDsStages dS buffers, into dq, dk, dv.
template <int kDsStages>
void run(const Problem& pr, void* dq, void* dk, void* dv) {
  BackwardParams b;
  AttnParams& p = b.fwd;
  p.q = pr.q, p.k = pr.k, p.v = pr.v, p.out = pr.out, p.lse = pr.lse;
  p.dtype = p.out_dtype = DType::kBFloat16;
  p.batch = pr.B, p.seqlen_q = p.seqlen_k = pr.L, p.heads_q = p.heads_kv = pr.H, p.head_dim = kD;
  const Strides4 st{pr.L * pr.H * kD, pr.H * kD, kD, 1};
  p.q_stride = p.k_stride = p.v_stride = p.out_stride = st;
  p.lse_stride = Strides3{pr.H * pr.L, pr.L, 1};
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.window_left = -1, p.window_right = pr.causal ? 0 : -1;
  p.seqs.max_q = p.seqs.max_k = pr.L;
  b.dout = pr.dout, b.dq = dq, b.dk = dk, b.dv = dv;
  b.dout_stride = b.dq_stride = b.dk_stride = b.dv_stride = st;
  b.grad_dtype = DType::kBFloat16;
  const int64_t rows = pr.B * pr.H * pr.L;
  const sm80::BwdKernelParams k = sm80::make_bwd_params(b, pr.rows, pr.rows + rows);
  sm80::bwd_preprocess(k, p.dtype, nullptr);
  sm90::BwdParams kp = sm90::bwd_params(b, k);
  kp.dq_accum = pr.accum;
  const int64_t tiles = p.heads_q * kp.dq_tiles.head_blocks, accum = tiles * kp.dq_tiles.block_m * kD;
  CHECK(cudaMemsetAsync(pr.accum, 0, accum * sizeof(float)));
  if (pr.order) CHECK(cudaMemsetAsync(pr.order, 0, tiles * sizeof(int)));
  kp.dq_order = pr.order;
  cuda::for_dtype_and_mask(p, [&](auto, auto mask) {
    sm90::launch_bwd<kD, __nv_bfloat16, typename decltype(mask)::type, false, kDsStages>(b, kp);
  });
  sm90::dq_from_accum(b, kp);
}

template <int kDsStages>
float time_ms(const Problem& pr, void* dq, void* dk, void* dv) {
  for (int i = 0; i < 3; ++i) run<kDsStages>(pr, dq, dk, dv);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) run<kDsStages>(pr, dq, dk, dv);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms / kCalls;
}

float bf16_at(const std::vector<uint16_t>& x, size_t i) {
  const uint32_t bits = uint32_t{x[i]} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

double max_diff(const void* a, const void* b, int64_t n) {
  std::vector<uint16_t> ha(n), hb(n);
  CHECK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::abs(double{bf16_at(ha, i)} - bf16_at(hb, i));
    worst = std::isnan(d) ? d : std::max(worst, d);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {1024, 4096, 16384};
  for (int64_t L : lengths)
    if (L < 64 || L > 16384 || L % 64 != 0) {
      std::printf("failed: L = %lld (64 to 16384, a multiple of 64)\n", static_cast<long long>(L));
      return 1;
    }
  const int64_t n = int64_t{16384} * 2048;  // elements of each [B, L, H, D] buffer
  Problem pr{};
  void* grads[6];
  for (void** ptr : {&pr.q, &pr.k, &pr.v, &pr.dout, &pr.out}) CHECK(cudaMalloc(ptr, n * 2));
  for (void*& g : grads) CHECK(cudaMalloc(&g, n * 2));
  CHECK(cudaMalloc(&pr.lse, n / kD * 4));
  CHECK(cudaMalloc(&pr.rows, 2 * n / kD * 4));
  CHECK(cudaMalloc(&pr.accum, n * 4));  // B x L x H x D floats: L a multiple of 64, the dQ tiles'
  int* order = nullptr;
  CHECK(cudaMalloc(&order, n / kD / 64 * sizeof(int)));
  cuda_test::fill_hash_bf16(pr.q, n, 1);
  cuda_test::fill_hash_bf16(pr.k, n, 2);
  cuda_test::fill_hash_bf16(pr.v, n, 3);
  cuda_test::fill_hash_bf16(pr.dout, n, 4);
  std::printf("%6s %6s %4s %7s | %26s | %27s | %s\n", "L", "B", "H", "causal", "one dS buffer: ms  TFLOP/s",
              "two dS buffers: ms  TFLOP/s", "deterministic max |diff| dq dk dv");
  for (int64_t L : lengths)
    for (bool causal : {false, true}) {
      pr.B = 16384 / L, pr.L = L, pr.H = 2048 / kD, pr.causal = causal;
      const TensorRef q = TensorRef::contiguous(pr.q, DType::kBFloat16, {pr.B, L, pr.H, kD}, Device::cuda());
      const TensorRef k = TensorRef::contiguous(pr.k, DType::kBFloat16, {pr.B, L, pr.H, kD}, Device::cuda());
      const TensorRef v = TensorRef::contiguous(pr.v, DType::kBFloat16, {pr.B, L, pr.H, kD}, Device::cuda());
      const TensorRef o =
          TensorRef::contiguous(pr.out, DType::kBFloat16, {pr.B, L, pr.H, kD}, Device::cuda());
      const TensorRef lse = TensorRef::contiguous(pr.lse, DType::kFloat32, {pr.B, pr.H, L}, Device::cuda());
      Options options;
      options.causal = causal;
      forward(q, k, v, o, &lse, options);
      const int64_t elems = pr.B * L * pr.H * kD;
      pr.order = order;  // deterministic mode: the same bits from both
      run<1>(pr, grads[0], grads[1], grads[2]);
      run<2>(pr, grads[3], grads[4], grads[5]);
      CHECK(cudaDeviceSynchronize());
      const double diffs[3] = {max_diff(grads[0], grads[3], elems), max_diff(grads[1], grads[4], elems),
                               max_diff(grads[2], grads[5], elems)};
      pr.order = nullptr;
      const float one = time_ms<1>(pr, grads[0], grads[1], grads[2]);
      const float two = time_ms<2>(pr, grads[3], grads[4], grads[5]);
      CHECK(cudaDeviceSynchronize());
      const double tflop = 2.5 * 4.0 * pr.B * pr.H * L * L * kD / (causal ? 2 : 1) / 1e9;
      const bool same = diffs[0] == 0 && diffs[1] == 0 && diffs[2] == 0;
      std::printf("%6lld %6lld %4lld %7d | %10.3f %13.1f | %10.3f %13.1f | %.3g %.3g %.3g%s\n",
                  static_cast<long long>(L), static_cast<long long>(pr.B), static_cast<long long>(pr.H),
                  static_cast<int>(causal), one, tflop / one, two, tflop / two, diffs[0], diffs[1], diffs[2],
                  same ? "" : "  FAILED: deterministic results differ");
    }
  for (void* ptr : {pr.q, pr.k, pr.v, pr.dout, pr.out, static_cast<void*>(pr.lse),
                    static_cast<void*>(pr.rows), static_cast<void*>(pr.accum)})
    cudaFree(ptr);
  for (void* g : grads) cudaFree(g);
  cudaFree(order);
  return 0;
}
