// tune_sm90.cuh: times the sm90 forward under alternative configs (not the library's), to back
// the choices in src/cuda/sm90/tile_config.h, and to time the kernel with one part of it turned
// off (ping-pong, GQA packing). Each variant's output is compared with the library's default
// kernel on the same inputs. Built with -DTILEATTN_SM90_TUNE=ON only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/params.h"
#include "cuda/sm90/launch.cuh"
#include "fill.h"
#include "tileattn/tileattn.h"

namespace tileattn::sm90_tune {

using detail::AttnParams;
using detail::sm90::TileConfig;

// Device buffers of n elements each (q, k, v, o, ref) and the LSE, and the problem timed.
struct Buffers {
  void *q, *k, *v, *o, *ref;
  float* lse;
  int64_t B, Lq, Lk, Hq, Hkv;
  int splits = 1;  // the variants' split count: 1, or 0 for the library's heuristic (decode)
  // A paged cache (page_size > 0): kp / vp hold k / v's pages of page_size keys scattered by
  // `table` (logical page b x Lk / page_size + i -> physical page), so the result is k / v's.
  int page_size = 0;
  const int32_t* table = nullptr;
  void *kp = nullptr, *vp = nullptr;
};

// buf's q, k, v, o, ref (n bf16 elements each) and lse allocated, q / k / v filled by a hash;
// false, said, when an allocation fails.
inline bool alloc_filled(Buffers* buf, int64_t n) {
  if (cudaMalloc(&buf->q, n * 2) || cudaMalloc(&buf->k, n * 2) || cudaMalloc(&buf->v, n * 2) ||
      cudaMalloc(&buf->o, n * 2) || cudaMalloc(&buf->ref, n * 2) || cudaMalloc(&buf->lse, n / 64 * 4)) {
    std::printf("cudaMalloc failed\n");
    return false;
  }
  cuda_test::fill_hash_bf16(buf->q, n, 1);
  cuda_test::fill_hash_bf16(buf->k, n, 2);
  cuda_test::fill_hash_bf16(buf->v, n, 3);
  return true;
}

// dst's page table[g] = src's page g, each page_bytes long (B x L / page_size pages).
void scatter_pages(const void* src, void* dst, const int32_t* table, int64_t pages, int64_t page_bytes);

// A config to time: cfg(head dim, block_n, stages, consumers), ping-pong on, the rest as
// TileConfig's defaults, changed by the helpers below, e.g. Cfg<chains(persistent(cfg(128, 128,
// 2, 2)), 4)>.
template <TileConfig C>
struct Cfg {
  static constexpr TileConfig kCfg = C;
};
constexpr TileConfig cfg(int d, int n, int stages, int consumers) {
  return TileConfig{d, n, stages, consumers, true};
}
constexpr TileConfig no_pingpong(TileConfig c) { return c.pingpong = false, c; }
constexpr TileConfig persistent(TileConfig c) { return c.persistent = true, c; }
constexpr TileConfig no_packing(TileConfig c) { return c.gqa_packing = false, c; }
constexpr TileConfig v_warps(TileConfig c) { return c.v_by_warps = true, c; }
constexpr TileConfig skip(TileConfig c) { return c.skip_masked_tail = true, c; }
constexpr TileConfig chains(TileConfig c, int n) { return c.softmax_chains = n, c; }
constexpr TileConfig o_direct(TileConfig c) { return c.o_direct = true, c; }
constexpr TileConfig defer_store(TileConfig c) { return c.defer_store_wait = true, c; }
constexpr TileConfig two_q(TileConfig c) { return c.q_buffers = 2, c; }
constexpr TileConfig lpt(TileConfig c, int mib) { return c.lpt_mib = mib, c; }
constexpr TileConfig l2_hints(TileConfig c) { return c.l2_hints = true, c; }
constexpr TileConfig aligned(TileConfig c) { return c.align_to_end = true, c; }
constexpr TileConfig no_align(TileConfig c) { return c.align_to_end = false, c; }
// The library's dense configs (tile_config), spelled out so that the variants below read as
// changes to them.
constexpr TileConfig kLib64 = aligned(two_q(defer_store(skip(persistent(cfg(64, 128, 2, 3))))));
constexpr TileConfig kLib128 = aligned(two_q(defer_store(persistent(cfg(128, 128, 2, 2)))));
constexpr TileConfig kLib256 = aligned(cfg(256, 80, 2, 2));
constexpr bool same(const TileConfig& a, const TileConfig& b) {
  return a.head_dim == b.head_dim && a.block_n == b.block_n && a.stages == b.stages &&
         a.consumers == b.consumers && a.pingpong == b.pingpong && a.persistent == b.persistent &&
         a.gqa_packing == b.gqa_packing && a.v_by_warps == b.v_by_warps &&
         a.skip_masked_tail == b.skip_masked_tail && a.softmax_chains == b.softmax_chains &&
         a.o_direct == b.o_direct && a.defer_store_wait == b.defer_store_wait && a.q_buffers == b.q_buffers &&
         a.lpt_mib == b.lpt_mib && a.l2_hints == b.l2_hints && a.align_to_end == b.align_to_end;
}
static_assert(same(kLib64, detail::sm90::tile_config(64)) && same(kLib128, detail::sm90::tile_config(128)) &&
                  same(kLib256, detail::sm90::tile_config(256)),
              "the tuning's library configs are tile_config's");

// buf's problem (bf16, contiguous [B, L, H, D], its split count) at head dim D.
inline AttnParams params_of(const Buffers& buf, int64_t D, bool causal) {
  const int64_t Lq = buf.Lq, Lk = buf.Lk, Hq = buf.Hq, Hkv = buf.Hkv;
  AttnParams p;
  p.q = buf.q, p.k = buf.k, p.v = buf.v, p.out = buf.o, p.lse = buf.lse;
  p.dtype = p.out_dtype = DType::kBFloat16;
  p.batch = buf.B, p.seqlen_q = Lq, p.seqlen_k = Lk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D;
  p.q_stride = p.out_stride = detail::Strides4{Lq * Hq * D, Hq * D, D, 1};
  p.k_stride = p.v_stride = detail::Strides4{Lk * Hkv * D, Hkv * D, D, 1};
  p.lse_stride = detail::Strides3{Hq * Lq, Lq, 1};
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.window_left = -1;
  p.window_right = causal ? 0 : -1;
  p.seqs.max_q = Lq, p.seqs.max_k = Lk;
  p.num_splits = buf.splits;
  if (buf.page_size > 0) {
    p.k = buf.kp, p.v = buf.vp;
    p.k_stride = p.v_stride = detail::Strides4{buf.page_size * Hkv * D, Hkv * D, D, 1};
    p.page_table = buf.table, p.page_size = buf.page_size, p.page_table_stride = Lk / buf.page_size;
    p.cache_rows = buf.B * Lk / buf.page_size;
  }
  return p;
}

// The largest |variant - default| over the output, read back on the host.
double max_diff_bf16(const void* a, const void* b, int64_t n);

// kServingOnly: the serving kernel alone, bf16 without a mask (one instantiation a config, for
// the split-decode variants of tune_sm90_split); else every bf16 kernel launch_for picks from.
template <class C, bool kServingOnly = false>
void time_one(const Buffers& buf, bool causal) {
  constexpr TileConfig c = C::kCfg;
  constexpr int64_t D = c.head_dim;
  const int64_t B = buf.B, Lq = buf.Lq, Lk = buf.Lk, Hq = buf.Hq, Hkv = buf.Hkv;
  const AttnParams p = params_of(buf, D, causal);
  const detail::sm90::LaunchShape shape = detail::sm90::launch_shape<C>(p);
  const int pack = shape.pack, splits = kServingOnly ? shape.splits : buf.splits;
  auto run = [&] {
    if constexpr (kServingOnly) {
      detail::sm90::launch<C, __nv_bfloat16, detail::NoMask, true>(p, pack, splits);
    } else {
      detail::sm90::launch_for<C, C, __nv_bfloat16>(p);  // bf16 only: half the kernels to build
    }
  };
  // The library's kernel on the same problem, for the comparison.
  auto ref = [&](void* ptr, int64_t L, int64_t H) {
    return TensorRef::contiguous(ptr, DType::kBFloat16, {B, L, H, D}, Device::cuda(0));
  };
  Options opt;
  opt.causal = causal;
  forward(ref(buf.q, Lq, Hq), ref(buf.k, Lk, Hkv), ref(buf.v, Lk, Hkv), ref(buf.ref, Lq, Hq), nullptr, opt);
  const int64_t n_out = B * Lq * Hq * D;
  cudaMemset(buf.o, 0xff, n_out * 2);  // NaN: unwritten elements show
  run();
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("D=%3d N=%3d stages=%d consumers=%d pingpong=%d causal=%d: FAILED (%s)\n", c.head_dim,
                c.block_n, c.stages, c.consumers, c.pingpong, causal, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  const double diff = max_diff_bf16(buf.o, buf.ref, n_out);
  std::vector<float> times;
  if constexpr (kServingOnly) {
    // The decode variants as bench/gpu/bench.py times: each call alone, after a 256 MiB memset
    // evicted the last call's K and V from L2 (back to back, up to ~50 MB of them would hit
    // there); the median of 100 calls after 10. TILEATTN_TUNE_NO_FLUSH=1 leaves the flush out
    // (the same calls, back to back), to tell the flush's share of a difference.
    static const bool no_flush = std::getenv("TILEATTN_TUNE_NO_FLUSH") != nullptr;
    static void* flush = nullptr;
    constexpr size_t kFlush = size_t{256} << 20;
    if (!flush && cudaMalloc(&flush, kFlush) != cudaSuccess) std::printf("flush buffer failed\n");
    std::vector<cudaEvent_t> ev(220);
    for (auto& e : ev) cudaEventCreate(&e);
    for (int i = 0; i < 110; ++i) {
      if (!no_flush) cudaMemsetAsync(flush, 0, kFlush);
      cudaEventRecord(ev[2 * i]);
      run();
      cudaEventRecord(ev[2 * i + 1]);
    }
    cudaEventSynchronize(ev.back());
    for (int i = 10; i < 110; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
      times.push_back(ms);
    }
    for (auto& e : ev) cudaEventDestroy(e);
  } else {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    // Each sample times `reps` calls back to back (the queue kept full, so that a short call's
    // launch gap stays out of it), reps chosen for ~2 ms a sample; the median of 15 samples.
    auto sample = [&](int reps) {
      cudaEventRecord(a);
      for (int i = 0; i < reps; ++i) run();
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      return ms / reps;
    };
    sample(3);
    const int reps = std::max(1, std::min(200, static_cast<int>(2.0 / std::max(1e-3f, sample(3)))));
    for (int r = 0; r < 15; ++r) times.push_back(sample(reps));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double flops = 4.0 * B * Hq * Lq * Lk * D * (causal && Lq == Lk ? 0.5 : 1.0);
  const double kv_bytes = 2.0 * B * Lk * Hkv * D * 2;
  std::printf(
      "D=%3d N=%3d stages=%d consumers=%d pingpong=%d persistent=%d packing=%d v_warps=%d skip=%d "
      "chains=%d o_direct=%d defer=%d q_bufs=%d lpt=%d l2=%d end=%d page=%d "
      "smem=%6d causal=%d splits=%d B=%lld Lq=%5lld Lk=%5lld Hq=%lld Hkv=%lld: %.3f ms %6.1f TFLOP/s %6.0f "
      "GB/s "
      "of K,V  max|diff vs default| %.3g\n",
      c.head_dim, c.block_n, c.stages, c.consumers, c.pingpong, c.persistent, c.gqa_packing, c.v_by_warps,
      c.skip_masked_tail, c.softmax_chains, c.o_direct, c.defer_store_wait, c.q_buffers, c.lpt_mib,
      c.l2_hints, c.align_to_end, buf.page_size, c.smem_bytes(), causal, splits, static_cast<long long>(B),
      static_cast<long long>(Lq), static_cast<long long>(Lk), static_cast<long long>(Hq),
      static_cast<long long>(Hkv), ms, flops / ms / 1e9, kv_bytes / ms / 1e6, diff);
}

void tune_d64(const Buffers& buf, bool causal);
void tune_d128(const Buffers& buf, bool causal);
void tune_d64_order(const Buffers& buf, bool causal);  // tile orders, L2 hints (tune_sm90_order.cu)
void tune_d128_order(const Buffers& buf, bool causal);
void tune_d256(const Buffers& buf, bool causal);
void tune_decode(const Buffers& buf, bool causal);  // GQA with short rows: packing on and off

}  // namespace tileattn::sm90_tune
