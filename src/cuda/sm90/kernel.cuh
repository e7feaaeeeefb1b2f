// kernel.cuh: the sm90 forward kernel: wiring of the scheduler (scheduler.cuh), the producer's
// loads and the consumers' GEMMs and softmax (mainloop.cuh, softmax.cuh) and the epilogue
// (epilogue.cuh). A producer warpgroup (one warp working) and two or three consumer warpgroups,
// with setmaxnreg.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/kernel_params.h"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/mainloop.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem.cuh"
#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"

// A CTA's timeline, for tests/cuda_sm90/tune_sm90_probe.cu (nothing in the library's builds).
#ifndef TILEATTN_SM90_PROBE
#define TILEATTN_SM90_PROBE(sm, point)
#endif

namespace tileattn::detail::sm90 {

// The cp.async gathers' and the V warps' address math wants more producer registers (at 32 or
// 40 they spill: 72 bytes for the V warps at D = 128, ptxas -v); the consumers give them up (224
// instead of 232 with two, 152 instead of 160 with three; no spills at 224, nvcc 13.0).
inline constexpr int kGatherProducerRegs = 56;
constexpr int gather_consumer_regs(const TileConfig& c) {
  return (65536 / 128 - kGatherProducerRegs) / c.consumers / 8 * 8;  // 224 (2 consumers), 152 (3)
}
// setmaxnreg moves registers between a CTA's warpgroups and cannot add any: an increase waits
// until decreases have freed enough of the launch's allocation (ptxas gives a 384-thread CTA
// 168 a thread, a 512-thread one 128), so a split past it hangs the consumers before their
// first instruction (64 / 224 with two consumers did on an H200: 65536 > 64512).
constexpr bool fits_launch(const TileConfig& c, int producer, int consumer) {
  const int threads = 128 * (1 + c.consumers);
  return 128 * (producer + c.consumers * consumer) <= threads * (65536 / threads / 8 * 8);
}

// v_warps: V's "full" barriers count the V warps' threads (VWarps), and the tile ring's "empty"
// their three warps beside the consumers'.
template <class Cfg>
__device__ __forceinline__ void init_barriers(const Smem<Cfg>& sm, bool v_warps) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  for (int b = 0; b < kCfg.q_buffers; ++b) mbarrier_init(sm.q_full(b), 1);
  for (int s = 0; s < kCfg.stages; ++s) {
    mbarrier_init(sm.k_full(s), 1);
    mbarrier_init(sm.v_full(s), v_warps ? VWarps::kThreads : 1);
    mbarrier_init(sm.k_empty(s), 4 * kCfg.consumers);
    mbarrier_init(sm.v_empty(s), 4 * kCfg.consumers);
  }
  mbarrier_init(sm.v_tail(), 1);
  if constexpr (kCfg.persistent) {
    // Released by every consumer warp, or with O in Q's rows, by each consumer's storing thread.
    for (int b = 0; b < kCfg.q_buffers; ++b)
      mbarrier_init(sm.q_empty(b), kCfg.o_in_q() ? kCfg.consumers : 4 * kCfg.consumers);
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(sm.tile_full(s), 1);
      mbarrier_init(sm.tile_empty(s), 4 * kCfg.consumers + (v_warps ? VWarps::kThreads / 32 : 0));
    }
  }
  fence_barrier_init();
}

// Both roles walk the same tiles and count them alike (Pipe); a tile past its sequence's rows is
// skipped by both. kServing: varlen, seqused or split-KV batches (scheduler.cuh, work_of);
// kGather: a paged cache gathered by cp.async (gather.cuh), a build of its own so the other
// serving kernels keep their registers.
template <class Cfg, class T, class Mask, bool kServing, bool kGather = false>
__global__ void __launch_bounds__(Cfg::kCfg.threads(), 1)
    attention_fwd_sm90(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                       const KernelParams p, int* tile_counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr TileConfig kCfg = Cfg::kCfg;
  static_assert(fits_launch(kCfg, kGatherProducerRegs, gather_consumer_regs(kCfg)) &&
                    fits_launch(kCfg, kCfg.producer_regs(), kCfg.consumer_regs()),
                "setmaxnreg's split needs more registers than the launch has");
  static_assert((kCfg.q_buffers == 1 && !kCfg.defer_store_wait) || (kCfg.persistent && kCfg.o_apart()),
                "a second Q buffer and the deferred store wait need persistent CTAs with O apart");
  extern __shared__ uint8_t smem_raw[];
  const Smem<Cfg> sm{
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023})};
  TILEATTN_SM90_PROBE(sm, 0);
  const bool v_warps = v_by_warps<Cfg, kServing, kGather>(p);
  // Producer warpgroups with address math beyond the TMA thread's: the gathers, the V warps.
  constexpr bool kWideProducer = kGather || (kServing && kCfg.v_by_warps);
  if (threadIdx.x == 0) init_barriers(sm, v_warps);
  __syncthreads();
  const int wg = warpgroup_index();
  Pipe pipe;
  if (wg == 0) {
    warpgroup_reg_dealloc<kWideProducer ? kGatherProducerRegs : kCfg.producer_regs()>();
    if (threadIdx.x < 32) {  // the producer warp
      if (threadIdx.x == 0) {
        tma_prefetch_descriptor(&tm_q);
        tma_prefetch_descriptor(&tm_k);
        tma_prefetch_descriptor(&tm_v);
      }
      Scheduler<Cfg>::produce(sm, p, tile_counter, [&](int64_t tile) {
        const Work w = work_of<Cfg, Mask, kServing>(p, tile);
        if (w.rows == 0) return;
        produce_tile<Cfg, kServing, kGather>(sm, p, &tm_q, &tm_k, &tm_v, w, pipe, v_warps);
        pipe.ring += w.blocks(), ++pipe.tiles, pipe.tails += w.tail;
      });
      TILEATTN_SM90_PROBE(sm, 3);
    } else if (v_warps) {  // warps 1-3: V by cp.async, over the tiles the consumers see
      Scheduler<Cfg>::consume(sm, [&](int64_t tile) {
        const Work w = work_of<Cfg, Mask, kServing>(p, tile);
        if (w.rows == 0) return;
        load_v_tile<Cfg>(sm, p, w, pipe);
        pipe.ring += w.blocks();
      });
      VWarps::drain();
    }
  } else {
    warpgroup_reg_alloc<kWideProducer ? gather_consumer_regs(kCfg) : kCfg.consumer_regs()>();
    const int consumer = wg - 1;
    const Turns<Cfg> turn{consumer};
    if constexpr (kCfg.persistent) turn.start();
    TILEATTN_SM90_PROBE(sm, 1);
    Scheduler<Cfg>::consume(sm, [&](int64_t tile) {
      const Work w = work_of<Cfg, Mask, kServing>(p, tile);
      if (w.rows == 0) return;
      consume_tile<Cfg, T, Mask, kServing>(sm, p, &tm_o, w, consumer, pipe, v_warps);
      pipe.ring += w.blocks(), ++pipe.tiles, pipe.tails += w.tail;
    });
    // Split-KV merged in the kernel: each CTA had one tile, blockIdx.x (launch.cuh sets arrivals
    // only then; a launch that did not would merge wrong rows, so it traps).
    if constexpr (kServing && kCfg.merges_splits())
      if (p.arrivals) {
        if (p.tiles > gridDim.x) __trap();
        const Work w = work_of<Cfg, Mask, kServing>(p, blockIdx.x);
        Epilogue<Cfg, T, kServing>{sm, p, &tm_o, consumer}.merge_if_last(w, threadIdx.x % kWarpgroupThreads);
      }
    // The deferred wait of the CTA's last O store (TileConfig::defer_store_wait).
    if constexpr (kCfg.defer_store_wait)
      if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait_read();
    TILEATTN_SM90_PROBE(sm, 2);
    turn.finish();
  }
#endif
}

}  // namespace tileattn::detail::sm90
