// tune_sm90_bwd [L...]: where the sm90 backward's time goes. At D = 64, 128 and 256 (bf16, hidden
// 2048, H = 2048 / D, B = 16384 / L, causal off and on; default L: 512 1024 4096 16384) it times
// the library's whole sm90 path (cuda/backward.cc: preprocessing, dQ sums zeroed, kernel,
// conversion) and each of the four parts alone, by CUDA events over 20 calls back to back after
// 3 (no L2 flush: the parts' shares, not the harness's rates). TFLOP/s = 2.5 x 4 B H L^2 D
// (halved when causal), of the whole path and of the kernel alone; "fixed" is the share of the
// whole path's time outside the kernel. At every head dim it times the persistent variant of the
// kernel too (bwd_kernel.cuh: one CTA an SM walking the tiles), alone (over the library's kernel
// timed just before it) and in the whole path, after checking its gradients against the library
// kernel's (deterministic mode: the same bits; otherwise dk and dv the same bits, dq within
// 1/256 of its largest magnitude); a mismatch fails the run. Inputs: a hash fill, out and lse
// from the forward.
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

constexpr int64_t kTokens = 16384, kHidden = 2048;

struct Buffers {
  void *q, *k, *v, *dout, *out, *dq, *dk, *dv;
  float *lse, *rows, *accum;
  int* order;  // deterministic mode's counters
};

// The library's sm90 path for one shape, each part callable alone (the same order and buffers as
// cuda/backward.cc), with the library's kernel or the persistent one.
struct Path {
  BackwardParams b;
  sm80::BwdKernelParams k;
  sm90::BwdParams kp;
  int64_t accum_floats = 0, tiles = 0;
  bool persistent = false;

  Path(const Buffers& m, int64_t B, int64_t L, int64_t D, bool causal, bool deterministic) {
    AttnParams& p = b.fwd;
    const int64_t H = kHidden / D;
    p.q = m.q, p.k = m.k, p.v = m.v, p.out = m.out, p.lse = m.lse;
    p.dtype = p.out_dtype = DType::kBFloat16;
    p.batch = B, p.seqlen_q = p.seqlen_k = L, p.heads_q = p.heads_kv = H, p.head_dim = D;
    const Strides4 st{L * H * D, H * D, D, 1};
    p.q_stride = p.k_stride = p.v_stride = p.out_stride = st;
    p.lse_stride = Strides3{H * L, L, 1};
    p.scale = 1.0f / std::sqrt(static_cast<float>(D));
    p.window_left = -1, p.window_right = causal ? 0 : -1;
    p.seqs.max_q = p.seqs.max_k = L;
    b.dout = m.dout, b.dq = m.dq, b.dk = m.dk, b.dv = m.dv;
    b.dout_stride = b.dq_stride = b.dk_stride = b.dv_stride = st;
    b.grad_dtype = DType::kBFloat16;
    const int64_t rows = B * H * L;
    k = sm80::make_bwd_params(b, m.rows, m.rows + rows);
    kp = sm90::bwd_params(b, k);
    kp.dq_accum = m.accum;
    tiles = p.heads_q * kp.dq_tiles.head_blocks;
    accum_floats = tiles * kp.dq_tiles.block_m * D;
    kp.dq_order = deterministic ? m.order : nullptr;
  }
  void preprocess() const { sm80::bwd_preprocess(k, DType::kBFloat16, nullptr); }
  void zero() const {
    CHECK(cudaMemsetAsync(kp.dq_accum, 0, accum_floats * sizeof(float)));
    if (kp.dq_order) CHECK(cudaMemsetAsync(kp.dq_order, 0, tiles * sizeof(int)));
  }
  void kernel() const {
    if (!persistent) return sm90::backward(b, kp);
    cuda::for_dtype_and_mask(b.fwd, [&](auto, auto mask) {
      using Mask = typename decltype(mask)::type;
      if (b.fwd.head_dim == 64)
        sm90::launch_bwd<64, __nv_bfloat16, Mask, false, true>(b, kp);
      else if (b.fwd.head_dim == 128)
        sm90::launch_bwd<128, __nv_bfloat16, Mask, false, true>(b, kp);
      else
        sm90::launch_bwd<256, __nv_bfloat16, Mask, false, true>(b, kp);
    });
  }
  void convert() const { sm90::dq_from_accum(b, kp); }
  void all() const {
    preprocess();
    zero();
    kernel();
    convert();
  }
};

float bf16_value(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <class F>
float time_ms(F&& call) {
  for (int i = 0; i < 3; ++i) call();
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) call();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms / kCalls;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {512, 1024, 4096, 16384};
  for (int64_t L : lengths)
    if (L < 128 || L > kTokens || kTokens % L != 0) {
      std::printf("failed: L = %lld (128 to 16384, dividing 16384)\n", static_cast<long long>(L));
      return 1;
    }
  const int64_t n = kTokens * kHidden;  // elements of each [B, L, H, D] buffer
  Buffers m{};
  for (void** ptr : {&m.q, &m.k, &m.v, &m.dout, &m.out, &m.dq, &m.dk, &m.dv}) CHECK(cudaMalloc(ptr, n * 2));
  CHECK(cudaMalloc(&m.lse, n / 64 * 4));  // B x H x L floats at D >= 64
  CHECK(cudaMalloc(&m.rows, 2 * n / 64 * 4));
  CHECK(cudaMalloc(&m.accum, 2 * n * 4));  // dQ's tiles, with room for the padding of the last
  cuda_test::fill_hash_bf16(m.q, n, 1);
  cuda_test::fill_hash_bf16(m.k, n, 2);
  cuda_test::fill_hash_bf16(m.v, n, 3);
  cuda_test::fill_hash_bf16(m.dout, n, 4);
  CHECK(cudaMalloc(&m.order, n / 64 / 64 * sizeof(int)));  // a counter a dQ tile (>= 64 rows)
  std::vector<uint16_t> first(3 * n), again(3 * n);        // dq, dk, dv of two runs
  bool failed = false;
  std::printf("%4s %6s %5s %4s %6s | %8s %7s | %10s %9s %9s %9s | %8s %7s | %s\n", "D", "L", "B", "H",
              "causal", "all: ms", "TFLOP/s", "preprocess", "zero", "kernel", "convert", "kernel", "fixed",
              "persistent: all ms, kernel ms, kernel TFLOP/s, over the library's kernel, same bits");
  for (int64_t D : {64, 128, 256})
    for (int64_t L : lengths)
      for (bool causal : {false, true}) {
        const int64_t B = kTokens / L, H = kHidden / D;
        const auto ref = [&](void* data) {
          return TensorRef::contiguous(data, DType::kBFloat16, {B, L, H, D}, Device::cuda());
        };
        const TensorRef lse = TensorRef::contiguous(m.lse, DType::kFloat32, {B, H, L}, Device::cuda());
        Options options;
        options.causal = causal;
        forward(ref(m.q), ref(m.k), ref(m.v), ref(m.out), &lse, options);
        Path path(m, B, L, D, causal, false);
        const float all = time_ms([&] { path.all(); });
        const float pre = time_ms([&] { path.preprocess(); });
        const float zero = time_ms([&] { path.zero(); });
        const float kern = time_ms([&] { path.kernel(); });
        const float conv = time_ms([&] { path.convert(); });
        const double tflop = 2.5 * 4.0 * B * H * L * L * D / (causal ? 2 : 1) / 1e9;
        std::printf("%4lld %6lld %5lld %4lld %6d | %8.3f %7.1f | %10.3f %9.3f %9.3f %9.3f | %8.1f %6.1f%% |",
                    static_cast<long long>(D), static_cast<long long>(L), static_cast<long long>(B),
                    static_cast<long long>(H), static_cast<int>(causal), all, tflop / all, pre, zero, kern,
                    conv, tflop / kern, 100.0 * (all - kern) / all);
        // The library's kernel, then the persistent one, into poisoned gradients. Deterministic
        // mode: the same bits of all three. Otherwise dK and dV (each one CTA's) the same bits,
        // dQ (its additions race) within 1/256 of its largest magnitude.
        const auto grads = [&](const Path& run, std::vector<uint16_t>* out) {
          for (void* g : {m.dq, m.dk, m.dv}) CHECK(cudaMemset(g, 0xFF, n * 2));
          run.all();
          CHECK(cudaDeviceSynchronize());
          int i = 0;
          for (void* g : {m.dq, m.dk, m.dv})
            CHECK(cudaMemcpy(out->data() + n * i++, g, n * 2, cudaMemcpyDeviceToHost));
        };
        const auto same_bits = [&](int from, int to) {
          return std::equal(first.begin() + n * from, first.begin() + n * to, again.begin() + n * from);
        };
        Path det(m, B, L, D, causal, true);
        grads(det, &first);
        det.persistent = true;
        grads(det, &again);
        const bool det_same = same_bits(0, 3);
        grads(path, &first);
        path.persistent = true;
        grads(path, &again);
        double worst = 0, largest = 0;
        for (int64_t i = 0; i < n; ++i) {
          largest = std::max(largest, std::abs(double{bf16_value(first[i])}));
          const double d = std::abs(double{bf16_value(first[i])} - bf16_value(again[i]));
          worst = std::isnan(d) ? d : std::max(worst, d);
        }
        const bool ok = det_same && same_bits(1, 3) && worst <= largest / 256;
        failed |= !ok;
        path.persistent = false;
        const float kern_lib = time_ms([&] { path.kernel(); });  // beside the persistent kernel's
        path.persistent = true;
        const float kern_p = time_ms([&] { path.kernel(); });
        const float all_p = time_ms([&] { path.all(); });
        std::printf(" %8.3f %8.3f %7.1f %6.3f %s\n", all_p, kern_p, tflop / kern_p, kern_lib / kern_p,
                    ok ? "yes" : "no  FAILED: the persistent kernel's gradients differ");
      }
  for (void* ptr : {m.q, m.k, m.v, m.dout, m.out, m.dq, m.dk, m.dv, static_cast<void*>(m.lse),
                    static_cast<void*>(m.rows), static_cast<void*>(m.accum), static_cast<void*>(m.order)})
    CHECK(cudaFree(ptr));
  return failed ? 1 : 0;
}
