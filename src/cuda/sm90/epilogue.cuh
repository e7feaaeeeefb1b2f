// epilogue.cuh: a consumer warpgroup's 64 finished rows written once: O / l through shared
// memory (a TMA store for dense batches, 16-byte stores for packed varlen ones, whose boxes
// would run into the next sequence), or with split-KV the fp32 partial state, merged by the
// split that stores last; and the LSE.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/online_softmax.h"
#include "cuda/common/kernel_params.h"
#include "cuda/common/math.cuh"
#include "cuda/common/merge.cuh"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem.cuh"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

// Points inside a dense tile's O store, for tests/cuda_sm90/tune_sm90_fwd_probe.cu (nothing in
// the library's builds): 0 the rows' last store read (first barrier), 1 O / l and the LSE
// written (dense kernels: O / l; their LSE after point 2), 2 the proxy fence and the second
// barrier passed.
#ifndef TILEATTN_SM90_EPILOGUE_PROBE
#define TILEATTN_SM90_EPILOGUE_PROBE(consumer, point)
#endif

namespace tileattn::detail::sm90 {

template <class Cfg, class T, bool kServing>
struct Epilogue {
  static constexpr TileConfig kCfg = Cfg::kCfg;
  static constexpr int kD = kCfg.head_dim;
  const Smem<Cfg>& sm;
  const KernelParams& p;
  const CUtensorMap* tm_o;
  int consumer;

  // o: the thread's accumulators (HOPPER_FACTS B3 layout, softmax.cuh); total: its two rows'
  // final states. Persistent CTAs first wait until the last tile's rows were read out.
  __device__ __forceinline__ void store(const float* o, const SoftmaxRow (&total)[2], const Work& w) const {
    const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32, g = lane / 4,
              q = lane % 4;
    const int shift = p.pack_shift;
    const int64_t rows_first = w.m0 + 64 * consumer;  // tile row of this consumer's row 0
    if (kServing && p.splits > 1) {
      store_partial(o, total, w, rows_first, warp, g, q);  // merged after the CTA's tiles (merge_if_last)
      if constexpr (kCfg.persistent && kCfg.o_in_q())
        if (tid == 0) mbarrier_arrive(sm.q_empty());  // Q's rows were not needed for staging
      return;
    }
    if constexpr (kCfg.o_direct) {
      store_direct(o, total, w, rows_first, warp, g, q);
      return;
    }
    const int epilogue_barrier = 1 + kCfg.consumers + consumer;
    // The last tile's store has read the staging rows (waited for here when deferred).
    if constexpr (kCfg.defer_store_wait)
      if (tid == 0) tma_store_wait_read();
    if constexpr (kCfg.persistent) named_sync(epilogue_barrier, kWarpgroupThreads);
    TILEATTN_SM90_EPILOGUE_PROBE(consumer, 0);
    // O / l into this consumer's 64 rows of O's staging (Q's own rows, whose last S GEMM is done,
    // or O's shared memory), as the 128-byte-swizzled rows TMA reads: 16-byte unit u of row r sits
    // at u ^ (r % 8), and r % 8 is this thread's g.
    uint8_t* const rows_smem = sm.o() + consumer * 64 * 128;
    // Dense kernels: O / l by stmatrix, the second barrier waited for by the storing warp only,
    // the LSE after it (1.00-1.02x, tile_config.h). Not in the serving kernels: a packed varlen
    // q's copy waits for every thread, and the second path cost D = 256's mainloop its uniform
    // wgmma descriptors (scripts/check_sass.py) and its paged gathers 16-32 bytes of spills.
    constexpr bool lean = !kServing;
    if (lean) stage_by_stmatrix(o, total, rows_smem, warp, lane);
#pragma unroll
    for (int half = 0; half < 2 && !lean; ++half) {
      // A row that saw no key is exactly 0, whatever the accumulators hold.
      const bool empty = total[half].l == 0.0f;
      const float inv_l = empty ? 0.0f : total[half].inv_l();
      const int r = 16 * warp + g + 8 * half;
#pragma unroll
      for (int i = 2 * half; i < kD / 2; i += 4) {  // accumulators i, i + 1: columns 8 (i >> 2) + 2 q, + 1
        uint8_t* dst =
            rows_smem + (i >> 5) * kCfg.block_m() * 128 + r * 128 + ((((i >> 2) & 7) ^ g) << 4) + 4 * q;
        *reinterpret_cast<uint32_t*>(dst) =
            cuda::pack2<T>(empty ? 0.0f : o[i] * inv_l, empty ? 0.0f : o[i + 1] * inv_l);
      }
      store_lse(total[half], w, rows_first + r, q, shift);
    }
    TILEATTN_SM90_EPILOGUE_PROBE(consumer, 1);
    fence_proxy_async();  // the generic-proxy writes, visible to the TMA store
    if (!lean) {
      named_sync(epilogue_barrier, kWarpgroupThreads);
    } else {  // ids past the turns' and the epilogues' (1 .. 2 consumers)
      if (warp == 0)
        named_sync(1 + 2 * kCfg.consumers + consumer, kWarpgroupThreads);
      else
        named_arrive(1 + 2 * kCfg.consumers + consumer, kWarpgroupThreads);
#pragma unroll
      for (int half = 0; half < 2; ++half)
        store_lse(total[half], w, rows_first + 16 * warp + g + 8 * half, q, shift);
    }
    TILEATTN_SM90_EPILOGUE_PROBE(consumer, 2);
    if (kServing && p.seqs.varlen_q()) {
      copy_rows(rows_smem, w, rows_first, tid);
      if constexpr (kCfg.persistent && kCfg.o_in_q()) {
        named_sync(epilogue_barrier, kWarpgroupThreads);  // every row read before the next Q lands
        if (tid == 0) mbarrier_arrive(sm.q_empty());
      }
      return;
    }
    if (tid == 0) {
      // One box per 64 columns; positions past seqlen_q are clipped by the map. A box at a
      // negative position (a consumer before row 0 of a tile aligned to the end, which has no
      // rows) is not issued: a TMA store there is an illegal instruction on an H100, where a
      // load reads zeros (blocks_test.cu).
      if (kServing || rows_first >= 0) {
#pragma unroll
        for (int c = 0; c < kD / 64; ++c)
          tma_store_5d(tm_o, rows_smem + c * kCfg.block_m() * 128, 64 * c, 0, w.h >> shift,
                       static_cast<int32_t>(rows_first >> shift), w.b);
      }
      tma_store_commit();
      // The rows may be reused (or the CTA exit) once the store read them.
      if constexpr (!kCfg.defer_store_wait) tma_store_wait_read();
      // Persistent CTAs, O in Q's rows: the next tile's Q may load into them now.
      if constexpr (kCfg.persistent && kCfg.o_in_q()) mbarrier_arrive(sm.q_empty());
    }
    __syncwarp();  // warp 0 converged again before any later bar.sync or wgmma
  }

  // Split-KV, merged in the kernel: the consumer that stores a group's 64 rows last (its arrival
  // counter reaching the split count) merges them from every split's partial state, a row a
  // warp at a time; a consumer past the rows takes no part, in every split alike. The counter
  // goes back to 0 for the next launch. splits <= 32, and each CTA has one tile (launch.cuh), so
  // the kernel calls this after its tile loop: inside it, the merge's loads and shuffles cost the
  // mainloop its uniform registers (its wgmma descriptors moved to vector registers, an R2UR
  // before every wgmma; SASS at 6beaaaa; varlen prefill, which runs this kernel, measured 0.93x
  // of the dense kernel at 66327c8 against 0.99-1.05x before the merge moved into the kernel).
  __device__ __forceinline__ void merge_if_last(const Work& w, int tid) const {
    const int64_t rows_first = w.m0 + 64 * consumer;
    if ((rows_first >> p.pack_shift) >= w.len_q) return;
    merge_rows(w, rows_first, tid);
  }

 private:
  // The LSE of tile row `row` (the thread with q == 0 of its quad), if the row's position is real.
  __device__ __forceinline__ void store_lse(const SoftmaxRow& t, const Work& w, int64_t row, int q,
                                            int shift) const {
    const int64_t pos = row >> shift;
    if (p.lse && q == 0 && (kServing || pos >= 0) && pos < w.len_q) {  // < 0: tiles aligned to the end
      const int64_t head = w.h + (row & ((int64_t{1} << shift) - 1));
      p.lse[w.b * p.lse_sb + head * p.lse_sh + (w.q_start + pos) * p.lse_sl] = t.lse();
    }
  }

  // O / l into this consumer's staging rows by stmatrix (dense kernels' epilogue): matrix m of
  // a thread's four holds rows 8 (m & 1) on of its warp's 16 and the 8 columns of chunk c +
  // (m >> 1), in the swizzled layout the TMA store reads (unit u of row r at u ^ (r % 8)).
  __device__ __forceinline__ void stage_by_stmatrix(const float* o, const SoftmaxRow (&total)[2],
                                                    uint8_t* rows_smem, int warp, int lane) const {
    bool empty[2];
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      empty[h] = total[h].l == 0.0f;  // a row that saw no key is exactly 0
      inv[h] = empty[h] ? 0.0f : total[h].inv_l();
    }
    const auto val = [&](int i, int h) { return empty[h] ? 0.0f : o[i] * inv[h]; };
    const int row8 = lane % 8, m = lane / 8, r = 16 * warp + row8 + 8 * (m & 1);
#pragma unroll
    for (int c = 0; c < kD / 8; c += 2) {
      const int cc = c + (m >> 1);
      const uint32_t addr =
          smem_addr(rows_smem + (cc >> 3) * kCfg.block_m() * 128 + r * 128 + (((cc & 7) ^ row8) << 4));
      stmatrix_x4(addr, cuda::pack2<T>(val(4 * c, 0), val(4 * c + 1, 0)),
                  cuda::pack2<T>(val(4 * c + 2, 1), val(4 * c + 3, 1)),
                  cuda::pack2<T>(val(4 * c + 4, 0), val(4 * c + 5, 0)),
                  cuda::pack2<T>(val(4 * c + 6, 1), val(4 * c + 7, 1)));
    }
  }

  // O / l straight from the accumulators (TileConfig::o_direct): the two columns a thread holds
  // side by side, one 4-byte store; rows past the sequence's positions are not written.
  __device__ __forceinline__ void store_direct(const float* o, const SoftmaxRow (&total)[2], const Work& w,
                                               int64_t rows_first, int warp, int g, int q) const {
    T* const out = static_cast<T*>(p.out) + w.b * p.o_sb;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = rows_first + 16 * warp + g + 8 * half, pos = row >> p.pack_shift;
      if ((!kServing && pos < 0) || pos >= w.len_q) continue;
      const int64_t head = w.h + (row & ((int64_t{1} << p.pack_shift) - 1));
      const bool empty = total[half].l == 0.0f;  // a row that saw no key is exactly 0
      const float inv_l = empty ? 0.0f : total[half].inv_l();
      T* const dst = out + (w.q_start + pos) * p.o_sl + head * p.o_sh + 2 * q;
#pragma unroll
      for (int i = 2 * half; i < kD / 2; i += 4)
        *reinterpret_cast<uint32_t*>(dst + 8 * (i >> 2)) =
            cuda::pack2<T>(empty ? 0.0f : o[i] * inv_l, empty ? 0.0f : o[i + 1] * inv_l);
      if (p.lse && q == 0)
        p.lse[w.b * p.lse_sb + head * p.lse_sh + (w.q_start + pos) * p.lse_sl] = total[half].lse();
    }
  }

  // Packed varlen q: the staged rows of this sequence, 16 bytes a store; rows past its end (the
  // next sequence's) are left alone.
  __device__ __forceinline__ void copy_rows(const uint8_t* rows_smem, const Work& w, int64_t rows_first,
                                            int tid) const {
    constexpr int kUnits = kD / 8;  // 16-byte units of a row
    T* const out = static_cast<T*>(p.out) + w.b * p.o_sb;
    for (int idx = tid; idx < 64 * kUnits; idx += kWarpgroupThreads) {
      const int r = idx / kUnits, unit = idx % kUnits, c = unit / 8, u = unit % 8;
      const int64_t row = rows_first + r, pos = row >> p.pack_shift;
      if (pos >= w.len_q) continue;
      const int64_t head = w.h + (row & ((int64_t{1} << p.pack_shift) - 1));
      const uint4 bits = *reinterpret_cast<const uint4*>(rows_smem + c * kCfg.block_m() * 128 + r * 128 +
                                                         ((u ^ (r % 8)) << 4));
      *reinterpret_cast<uint4*>(out + (w.q_start + pos) * p.o_sl + head * p.o_sh + 8 * unit) = bits;
    }
  }

  // merge_if_last's arrival, and the merge once this consumer arrived last.
  __device__ __forceinline__ void merge_rows(const Work& w, int64_t rows_first, int tid) const {
    const int barrier = 1 + kCfg.consumers + consumer;
    __threadfence();  // this thread's partial rows, visible device-wide before the arrival
    named_sync(barrier, kWarpgroupThreads);
    int* const arrival = p.arrivals + int64_t{w.group} * kCfg.consumers + consumer;
    const bool last =
        named_sync_or(barrier, kWarpgroupThreads, tid == 0 && atomicAdd(arrival, 1) == p.splits - 1);
    if (!last) return;
    __threadfence();  // the other splits' rows, read after their arrivals
    if (tid == 0) *arrival = 0;
    const int64_t pb = p.seqs.varlen_q() ? 0 : w.b;
    for (int r = tid / 32; r < 64; r += kWarpgroupThreads / 32) {
      const int64_t row = rows_first + r, pos = row >> p.pack_shift;
      if (pos >= w.len_q) break;
      const int64_t head = w.h + (row & ((int64_t{1} << p.pack_shift) - 1)), at = w.q_start + pos;
      const float lse = cuda::merge_row<T, 1, 4, 4>(p.lse_part + pb * p.lp_sb + head * p.lp_sh + at, p.lp_ss,
                                                    p.o_part + pb * p.op_sb + at * p.op_sl + head * p.op_sh,
                                                    p.op_ss, 1, p.splits, p.d_chunks * 8, p.out,
                                                    w.b * p.o_sb + at * p.o_sl + head * p.o_sh, 1);
      if (p.lse && tid % 32 == 0) p.lse[w.b * p.lse_sb + head * p.lse_sh + at * p.lse_sl] = lse;
    }
  }

  // Split-KV: the rows' fp32 O / l (unrounded) and LSE, straight from the accumulators.
  __device__ __forceinline__ void store_partial(const float* o, const SoftmaxRow (&total)[2], const Work& w,
                                                int64_t rows_first, int warp, int g, int q) const {
    const int64_t pb = p.seqs.varlen_q() ? 0 : w.b;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = rows_first + 16 * warp + g + 8 * half, pos = row >> p.pack_shift;
      if (pos >= w.len_q) continue;
      const int64_t head = w.h + (row & ((int64_t{1} << p.pack_shift) - 1)), at = w.q_start + pos;
      const bool empty = total[half].l == 0.0f;
      const float inv_l = empty ? 0.0f : total[half].inv_l();
      float* dst = p.o_part + w.split * p.op_ss + pb * p.op_sb + at * p.op_sl + head * p.op_sh;
#pragma unroll
      for (int i = 2 * half; i < kD / 2; i += 4)
        *reinterpret_cast<float2*>(dst + 8 * (i >> 2) + 2 * q) =
            make_float2(empty ? 0.0f : o[i] * inv_l, empty ? 0.0f : o[i + 1] * inv_l);
      if (q == 0) p.lse_part[w.split * p.lp_ss + pb * p.lp_sb + head * p.lp_sh + at] = total[half].lse();
    }
  }
};

}  // namespace tileattn::detail::sm90
