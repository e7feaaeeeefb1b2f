// tune_sm90_bwd [L...]: where the sm90 backward's time goes. At D = 64, 128 and 256 (bf16, hidden
// 2048, H = 2048 / D, B = 16384 / L, causal off and on; default L: 512 1024 4096 16384) it times
// the library's whole sm90 path (cuda/backward.cc: preprocessing, which zeroes the dQ sums in the
// same pass, kernel, conversion) and each part alone (the preprocessing without and with the
// zeroing, and a memset of the sums beside them), by CUDA events over 20 calls back to back after
// 3 (no L2 flush: the parts' shares, not the harness's rates). TFLOP/s = 2.5 x 4 B H L^2 D
// (halved when causal), of the whole path and of the kernel alone; "fixed" is the share of the
// whole path's time outside the kernel. Beside the library's kernel (timed just before each) it
// times two variants alone: persistent CTAs (one an SM walking the tiles) at every head dim, and
// dK / dV stored straight from the accumulators (BwdTuning::kStageDkDv off; the library's kernel
// stages them in shared memory) at 64 and 128 (each step's dQ GEMM before its dK GEMM ran at
// 0.94-1.03x, removed: docs/kernels/sm90_log.md); and without a mask deterministic mode in the library's
// plain launch order and with 2, 4 and 8 (batch, KV head) pairs' key blocks interleaved
// (BwdParams::det_group_log2), each over the fast kernel; at D = 128 without a mask the library's
// 80-row kernel over 64-row steps (Variant::kRows64), the kernel and the whole path. Their gradients are
// checked first against the library kernel's, poisoned before each run (agrees), on these shapes and on
// windows with Lq != Lk over small grids (tiles without steps); a mismatch fails the run. Inputs: a hash
// fill, out and lse from the library's forward. Last, the kernel's timeline CTA by CTA without a mask
// (tune_sm90_bwd_probe.cu): the library's kernel in the fast and the deterministic mode at D = 64, 128 and
// 256, and direct at 64 and 128.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/convert.h"
#include "cuda/sm80/sm80.h"
#include "cuda/sm90/bwd_launch.cuh"
#include "fill.h"
#include "tileattn/tileattn.h"

// tune_sm90_bwd_probe.cu: the kernel with dK and dV stored straight from the accumulators (D = 64
// and 128), and its timeline.
void bwd_direct_kernel(const tileattn::detail::BackwardParams& b,
                       const tileattn::detail::sm90::BwdParams& kp);
void bwd_timeline(const tileattn::detail::BackwardParams& b, const tileattn::detail::sm90::BwdParams& kp,
                  int steps, bool direct, void* flush, size_t flush_bytes);

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
constexpr int64_t kElems = kTokens * kHidden;  // each buffer's elements

struct Buffers {
  void *q, *k, *v, *dout, *out, *dq, *dk, *dv;
  float *lse, *rows, *accum;
  int* order;  // deterministic mode's counters
};

// A problem: [B, L, H, D] tensors, H heads of q and of k / v, a window (-1: unbounded).
struct Shape {
  int64_t B, Lq, Lk, H, D, left = -1, right = -1;
  int64_t q_elems() const { return B * Lq * H * D; }
  int64_t k_elems() const { return B * Lk * H * D; }
};

// The library's sm90 path for one shape, each part callable alone (the same order and buffers as
// cuda/backward.cc), with the library's kernel, the persistent one (over `ctas` CTAs: 0, the
// launch's choice) or the one that stores dK and dV straight from the accumulators (D = 64 and 128).
// kRows64: D = 128 without a mask in 64-row steps, as before the 80-row kernel (the WindowMask
// kernel with an unbounded window: the same code as the 64-row NoMask kernel but for the type).
enum class Variant { kLibrary, kPersistent, kDirect, kGrouped, kRows64 };
// kGrouped: deterministic mode without a mask with the key blocks of 2^g_pair_group_log2 (batch, KV
// head) pairs interleaved in the launch order (the library's kernel, BwdParams::det_group_log2;
// the library picks it by det_pair_group_log2): the same bits as the plain order.
int g_pair_group_log2 = 3;
struct Path {
  BackwardParams b;
  sm80::BwdKernelParams k;
  sm90::BwdParams kp;
  int64_t accum_floats = 0, tiles = 0, ctas = 0;
  Variant variant = Variant::kLibrary;

  Path(const Buffers& m, const Shape& sh, bool deterministic) {
    AttnParams& p = b.fwd;
    p.q = m.q, p.k = m.k, p.v = m.v, p.out = m.out, p.lse = m.lse;
    p.dtype = p.out_dtype = DType::kBFloat16;
    p.batch = sh.B, p.seqlen_q = sh.Lq, p.seqlen_k = sh.Lk, p.heads_q = p.heads_kv = sh.H, p.head_dim = sh.D;
    const Strides4 sq{sh.Lq * sh.H * sh.D, sh.H * sh.D, sh.D, 1},
        sk{sh.Lk * sh.H * sh.D, sh.H * sh.D, sh.D, 1};
    p.q_stride = p.out_stride = sq;
    p.k_stride = p.v_stride = sk;
    p.lse_stride = Strides3{sh.H * sh.Lq, sh.Lq, 1};
    p.scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
    p.window_left = sh.left, p.window_right = sh.right;
    p.seqs.max_q = sh.Lq, p.seqs.max_k = sh.Lk;
    b.dout = m.dout, b.dq = m.dq, b.dk = m.dk, b.dv = m.dv;
    b.dout_stride = b.dq_stride = sq;
    b.dk_stride = b.dv_stride = sk;
    b.grad_dtype = DType::kBFloat16;
    k = sm80::make_bwd_params(b, m.rows, m.rows + sh.B * sh.H * sh.Lq);
    kp = sm90::bwd_params(b, k);
    kp.dq_accum = m.accum;
    tiles = p.heads_q * kp.dq_tiles.head_blocks;
    accum_floats = tiles * kp.dq_tiles.block_m * sh.D;
    kp.dq_order = deterministic ? m.order : nullptr;
  }
  void rows64() {  // Variant::kRows64: dQ's tiles of 64 rows
    const int64_t blocks = (b.fwd.seqlen_q + 63) / 64;
    kp.dq_tiles = sm90::DqTiles::make(nullptr, b.fwd.batch, blocks, b.fwd.batch * b.fwd.seqlen_q, 64);
    tiles = b.fwd.heads_q * kp.dq_tiles.head_blocks;
    accum_floats = tiles * 64 * b.fwd.head_dim;
    variant = Variant::kRows64;
  }
  void preprocess() const { sm80::bwd_preprocess(k, DType::kBFloat16, nullptr); }
  void preprocess_zeroing() const {  // the library's: the dQ sums zeroed in the same pass
    sm80::bwd_preprocess(k, DType::kBFloat16, nullptr, kp.dq_accum, accum_floats);
    reset_order();
  }
  void reset_order() const {  // deterministic mode's counters back to 0 before a launch
    if (kp.dq_order) CHECK(cudaMemsetAsync(kp.dq_order, 0, tiles * sizeof(int)));
  }
  void zero() const {
    CHECK(cudaMemsetAsync(kp.dq_accum, 0, accum_floats * sizeof(float)));
    reset_order();
  }
  void kernel() const {
    if (variant == Variant::kLibrary || variant == Variant::kGrouped) {
      sm90::BwdParams order = kp;
      order.det_group_log2 = variant == Variant::kGrouped ? g_pair_group_log2 : 0;
      return sm90::backward(b, order);
    }
    if (variant == Variant::kDirect) return bwd_direct_kernel(b, kp);
    if (variant == Variant::kRows64) return sm90::launch_bwd<128, __nv_bfloat16, WindowMask, false>(b, kp);
    cuda::for_dtype_and_mask(b.fwd, [&](auto, auto mask) {
      using Mask = typename decltype(mask)::type;
      if (b.fwd.head_dim == 64)
        sm90::launch_bwd<64, __nv_bfloat16, Mask, false, true>(b, kp, ctas);
      else if (b.fwd.head_dim == 128)
        sm90::launch_bwd<128, __nv_bfloat16, Mask, false, true>(b, kp, ctas);
      else
        sm90::launch_bwd<256, __nv_bfloat16, Mask, false, true>(b, kp, ctas);
    });
  }
  void convert() const { sm90::dq_from_accum(b, kp); }
  void all() const {
    preprocess_zeroing();
    kernel();
    convert();
  }
};

// out and lse of sh by the library's forward, into the buffers the paths read.
void forward_of(const Buffers& m, const Shape& sh) {
  const auto ref = [&](void* data, int64_t L) {
    return TensorRef::contiguous(data, DType::kBFloat16, {sh.B, L, sh.H, sh.D}, Device::cuda());
  };
  const TensorRef lse = TensorRef::contiguous(m.lse, DType::kFloat32, {sh.B, sh.H, sh.Lq}, Device::cuda());
  Options options;
  options.window_left = sh.left, options.window_right = sh.right;
  forward(ref(m.q, sh.Lq), ref(m.k, sh.Lk), ref(m.v, sh.Lk), ref(m.out, sh.Lq), &lse, options);
}

// dq, dk, dv of one run of `run` into `out` (their elements in turn), the gradients poisoned first.
void gradients(const Buffers& m, const Shape& sh, const Path& run, std::vector<uint16_t>* out) {
  const int64_t nq = sh.q_elems(), nk = sh.k_elems();
  for (void* g : {m.dq, m.dk, m.dv}) CHECK(cudaMemset(g, 0xFF, std::max(nq, nk) * 2));
  run.all();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(out->data(), m.dq, nq * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(out->data() + nq, m.dk, nk * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(out->data() + nq + nk, m.dv, nk * 2, cudaMemcpyDeviceToHost));
}

// Whether b's bf16 values [from, to) are within a bf16 step (1/128) of a's largest magnitude
// there of a's (a NaN difference fails).
bool within_a_step(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t from, int64_t to) {
  double worst = 0, largest = 0;
  for (int64_t i = from; i < to; ++i) {
    largest = std::max(largest, std::abs(double{detail::bf16_to_float(a[i])}));
    const double d = std::abs(double{detail::bf16_to_float(a[i])} - detail::bf16_to_float(b[i]));
    worst = std::isnan(d) ? d : std::max(worst, d);
  }
  return worst <= largest / 128;
}

// Whether a variant's kernel (persistent: over ctas CTAs) gives the library kernel's gradients for
// sh: in deterministic mode the same bits of all three; otherwise dK and dV (each one CTA's) the
// same bits, dQ (its additions race) within a bf16 step of its largest magnitude.
bool agrees(const Buffers& m, const Shape& sh, Variant variant, int64_t ctas, std::vector<uint16_t>* a,
            std::vector<uint16_t>* b) {
  const int64_t nq = sh.q_elems(), n = nq + 2 * sh.k_elems();
  bool ok = true;
  for (bool deterministic : {true, false}) {
    Path path(m, sh, deterministic);
    path.ctas = ctas;
    gradients(m, sh, path, a);
    path.variant = variant;
    gradients(m, sh, path, b);
    const int64_t from = deterministic ? 0 : nq;
    ok &= std::equal(a->begin() + from, a->begin() + n, b->begin() + from);
    ok &= within_a_step(*a, *b, 0, nq);
  }
  return ok;
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
  Buffers m{};
  for (void** ptr : {&m.q, &m.k, &m.v, &m.dout, &m.out, &m.dq, &m.dk, &m.dv})
    CHECK(cudaMalloc(ptr, kElems * 2));
  CHECK(cudaMalloc(&m.lse, kElems / 64 * 4));  // B x H x L floats at D >= 64
  CHECK(cudaMalloc(&m.rows, 2 * kElems / 64 * 4));
  CHECK(cudaMalloc(&m.accum, 2 * kElems * 4));  // dQ's tiles, with room for the padding of the last
  CHECK(cudaMalloc(&m.order, kElems / 64 / 64 * sizeof(int)));  // a counter a dQ tile (>= 64 rows)
  cuda_test::fill_hash_bf16(m.q, kElems, 1);
  cuda_test::fill_hash_bf16(m.k, kElems, 2);
  cuda_test::fill_hash_bf16(m.v, kElems, 3);
  cuda_test::fill_hash_bf16(m.dout, kElems, 4);
  std::vector<uint16_t> first(3 * kElems), again(3 * kElems);  // dq, dk, dv of two runs
  bool failed = false;

  // The persistent walk where tiles have no steps (windows, Lq != Lk), at its first, middle or
  // last tiles, over small grids and the launch's own.
  const Shape checks[] = {{2, 256, 2048, 2, 0, 128, 0},
                          {1, 200, 1000, 3, 0, 100, 30},
                          {2, 1024, 1024, 2, 0, 64, 64},
                          {1, 2048, 256, 2, 0, 64, 0},
                          {2, 512, 512, 2, 0, -1, 0}};
  for (int64_t D : {64, 128, 256})
    for (Shape sh : checks) {
      sh.D = D;
      forward_of(m, sh);
      struct Check {
        Variant v;
        int64_t ctas;  // the persistent walk's (0: the launch's choice)
        const char* name;
      };
      const Check variants[] = {
          {Variant::kPersistent, 1, "persistent"},  {Variant::kPersistent, 2, "persistent"},
          {Variant::kPersistent, 3, "persistent"},  {Variant::kPersistent, 7, "persistent"},
          {Variant::kPersistent, 13, "persistent"}, {Variant::kPersistent, 0, "persistent"},
          {Variant::kDirect, 0, "direct dK / dV"}};
      for (const Check& c : variants) {
        if (c.v != Variant::kPersistent && D == 256) continue;  // D = 64 and 128 only
        const bool ok = agrees(m, sh, c.v, c.ctas, &first, &again);
        failed |= !ok;
        if (!ok)
          std::printf("FAILED: %s at D %lld, B %lld Lq %lld Lk %lld H %lld window (%lld, %lld), %lld CTAs\n",
                      c.name, static_cast<long long>(D), static_cast<long long>(sh.B),
                      static_cast<long long>(sh.Lq), static_cast<long long>(sh.Lk),
                      static_cast<long long>(sh.H), static_cast<long long>(sh.left),
                      static_cast<long long>(sh.right), static_cast<long long>(c.ctas));
      }
    }
  // Deterministic mode's grouped launch order (2, 4 and 8 of 16 pairs a group).
  for (int64_t D : {64, 128, 256})
    for (int log2 : {1, 2, 3}) {
      const Shape sh{4, 384, 384, 4, D, -1, -1};
      forward_of(m, sh);
      g_pair_group_log2 = log2;
      const bool ok = agrees(m, sh, Variant::kGrouped, 0, &first, &again);
      failed |= !ok;
      if (!ok)
        std::printf("FAILED: grouped launch order at D %lld, 16 pairs, %d a group\n",
                    static_cast<long long>(D), 1 << log2);
    }
  std::printf(
      "persistent walk, direct dK / dV stores and the grouped deterministic order against the library's "
      "kernel, windows and small grids: %s\n",
      failed ? "FAILED" : "the same gradients");

  std::printf(
      "%4s %6s %5s %4s %6s | %8s %7s | %10s %9s %9s %9s %9s | %8s %7s | %s\n", "D", "L", "B", "H", "causal",
      "all: ms", "TFLOP/s", "preprocess", "zero", "both", "kernel", "convert", "kernel", "fixed",
      "over the library's kernel: persistent, direct dK / dV (agree) | without a mask, the fast kernel's "
      "time over deterministic mode's, the plain order and 2 / 4 / 8 pairs grouped (agree), a pair's "
      "Q and dO in MiB");
  for (int64_t D : {64, 128, 256})
    for (int64_t L : lengths)
      for (bool causal : {false, true}) {
        const Shape sh{kTokens / L, L, L, kHidden / D, D, -1, causal ? 0 : -1};
        forward_of(m, sh);
        Path path(m, sh, false);
        const float all = time_ms([&] { path.all(); });
        const float pre = time_ms([&] { path.preprocess(); });
        const float zero = time_ms([&] { path.zero(); });
        const float both = time_ms([&] { path.preprocess_zeroing(); });
        const float kern = time_ms([&] { path.kernel(); });
        const float conv = time_ms([&] { path.convert(); });
        const double tflop = 2.5 * 4.0 * sh.B * sh.H * L * L * D / (causal ? 2 : 1) / 1e9;
        std::printf(
            "%4lld %6lld %5lld %4lld %6d | %8.3f %7.1f | %10.3f %9.3f %9.3f %9.3f %9.3f | %8.1f %6.1f%% |",
            static_cast<long long>(D), static_cast<long long>(L), static_cast<long long>(sh.B),
            static_cast<long long>(sh.H), static_cast<int>(causal), all, tflop / all, pre, zero, both, kern,
            conv, tflop / kern, 100.0 * (all - kern) / all);
        for (Variant v : {Variant::kPersistent, Variant::kDirect}) {
          if (v != Variant::kPersistent && D == 256) continue;
          const bool ok = agrees(m, sh, v, 0, &first, &again);
          failed |= !ok;
          path.variant = Variant::kLibrary;
          const float kern_lib = time_ms([&] { path.kernel(); });  // just before the variant's
          path.variant = v;
          const float kern_v = time_ms([&] { path.kernel(); });
          std::printf(" %6.3f (%s)", kern_lib / kern_v, ok ? "yes" : "no: FAILED");
        }
        if (D == 128 && !causal) {  // the 80-row kernel over 64-row steps: the kernel, the whole path
          Path r64(m, sh, false);
          r64.rows64();
          gradients(m, sh, path, &first);
          gradients(m, sh, r64, &again);
          const int64_t nq = sh.q_elems(), nk = sh.k_elems();  // each gradient (their sums' order differs)
          const bool ok = within_a_step(first, again, 0, nq) && within_a_step(first, again, nq, nq + nk) &&
                          within_a_step(first, again, nq + nk, nq + 2 * nk);
          failed |= !ok;
          const float k80 = time_ms([&] { path.kernel(); }), k64 = time_ms([&] { r64.kernel(); });
          const float a80 = time_ms([&] { path.all(); }), a64 = time_ms([&] { r64.all(); });
          std::printf(" | 80 rows over 64: kernel %6.3f, all %6.3f (%s)", k64 / k80, a64 / a80,
                      ok ? "yes" : "no: FAILED");
        }
        // Deterministic mode, its counters reset before each launch: the plain order, then grouped.
        if (!causal) {
          Path det(m, sh, true);
          const float det_lib = time_ms([&] { det.reset_order(), det.kernel(); });
          std::printf(" | deterministic %6.3f, grouped", kern / det_lib);
          for (int log2 : {1, 2, 3}) {
            g_pair_group_log2 = log2;
            const bool ok = agrees(m, sh, Variant::kGrouped, 0, &first, &again);
            failed |= !ok;
            Path grouped(m, sh, true);
            grouped.variant = Variant::kGrouped;
            const float det_grouped = time_ms([&] { grouped.reset_order(), grouped.kernel(); });
            std::printf(" %6.3f (%s)", kern / det_grouped, ok ? "yes" : "no: FAILED");
          }
          std::printf(", %.2f", 2.0 * L * sh.D * 2 / (1 << 20));
        }
        std::printf("\n");
      }
  std::printf("the kernel CTA by CTA, one launch after an L2 flush (medians, us):\n");
  void* flush = nullptr;
  constexpr size_t kFlushBytes = size_t{256} << 20;
  CHECK(cudaMalloc(&flush, kFlushBytes));
  for (int64_t D : {64, 128, 256})
    for (int64_t L : lengths)
      for (int run = 0; run < 3; ++run) {  // the library's kernel, fast and deterministic; direct, fast
        const bool direct = run == 2, deterministic = run == 1;
        if (direct && D == 256) continue;
        const Shape sh{kTokens / L, L, L, kHidden / D, D, -1, -1};
        forward_of(m, sh);
        const Path path(m, sh, deterministic);
        path.preprocess();
        path.zero();
        std::printf("  D %3lld L %5lld %s:", static_cast<long long>(D), static_cast<long long>(L),
                    direct          ? "direct "
                    : deterministic ? "det.   "
                                    : "library");
        bwd_timeline(path.b, path.kp,
                     static_cast<int>((L + path.kp.dq_tiles.block_m - 1) / path.kp.dq_tiles.block_m), direct,
                     flush, kFlushBytes);
      }
  CHECK(cudaFree(flush));
  for (void* ptr : {m.q, m.k, m.v, m.dout, m.out, m.dq, m.dk, m.dv, static_cast<void*>(m.lse),
                    static_cast<void*>(m.rows), static_cast<void*>(m.accum), static_cast<void*>(m.order)})
    CHECK(cudaFree(ptr));
  return failed ? 1 : 0;
}
