// scheduler.cuh: which tile a CTA computes next and what the tile is (its sequence, rows, key
// blocks and split): one tile per CTA, or persistent CTAs fed by a counter in global memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "common/seqlens.h"
#include "cuda/common/kernel_params.h"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/smem.cuh"
#include "cuda/sm90/tile_order.h"

namespace tileattn::detail::sm90 {

using cuda::KernelParams;

// One tile: rows [m0, m0 + rows) of query heads h .. h + pack - 1 in batch b (row r is position
// r >> pack_shift of head h + r % pack: GQA packing, tile_config.h; without packing rows are
// positions of head h) against key blocks [n_begin, n_end) of its split. Positions count from
// the sequence's first row q_start. A tile aligned to the end (TileConfig::align_to_end) may
// start at a negative row m0, a multiple of 64: its consumers there have no rows. 32-bit: the
// producer runs on 40 registers.
struct Work {
  int32_t b, h, hk, m0, rows;            // rows = 0: the tile lies past its sequence's end (nothing to do)
  int32_t n_begin, n_end, split, group;  // group: the tile before the split (split-KV's merge)
  int32_t q_start, k_start, len_q, len_k;
  // The last block runs past the keys of a sequence whose storage goes on (packed or seqused):
  // its V rows there hold another sequence's or unused values, which are zeroed before P V.
  bool tail;
  __device__ int32_t blocks() const { return n_end - n_begin; }
  // The storage row of the first key of the tile's block j (blocks of block_n keys).
  __device__ int32_t key(int64_t j, int block_n) const {
    return static_cast<int32_t>(k_start + (n_begin + j) * block_n);
  }
};

// Whether the kernel's tiles end at the rows' end (TileConfig::align_to_end): dense kernels
// under a mask.
template <class Cfg, class Mask, bool kServing>
constexpr bool aligned_to_end() {
  return Cfg::kCfg.align_to_end && Mask::kMasks && !kServing;
}

// kServing: the batch may be varlen, seqused or split (else every sequence is the tensors' length,
// one split: the dense kernel keeps none of it in registers).
template <class Cfg, class Mask, bool kServing>
__device__ __forceinline__ Work work_of(const KernelParams& p, int64_t tile) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  Work w;
  w.split = 0;
  if constexpr (kServing) {
    w.split = static_cast<int32_t>(tile % p.splits);
    tile /= p.splits;
  }
  w.group = static_cast<int32_t>(tile);
  // Later query tiles see more keys under a causal mask: they get the lower block indices.
  int64_t m_block, bh;
  if constexpr (kCfg.lpt_mib != 0) {  // longest first across pairs (TileConfig::lpt_mib)
    const TileSlot slot = lpt_tile(tile, p.m_blocks, p.order_pairs, p.order_section);
    m_block = slot.m_block, bh = slot.pair;
  } else {
    m_block = p.m_blocks - 1 - tile % p.m_blocks;
    bh = tile / p.m_blocks;
  }
  const int64_t heads = p.heads_q >> p.pack_shift;
  w.b = static_cast<int32_t>(bh / heads);
  w.h = static_cast<int32_t>((bh % heads) << p.pack_shift);
  w.hk = static_cast<int32_t>(w.h / p.group);
  const SeqInfo seq = kServing ? seq_info(p.seqs, w.b) : SeqInfo{0, 0, p.seqlen_q, p.seqlen_k};
  w.q_start = static_cast<int32_t>(seq.q_start), w.k_start = static_cast<int32_t>(seq.k_start);
  w.len_q = static_cast<int32_t>(seq.len_q), w.len_k = static_cast<int32_t>(seq.len_k);
  // Aligned to the end: every tile moved back by the rows the last one would run past the end,
  // rounded down to whole consumers (< block_m, so the first tile keeps 64 rows or more).
  int64_t shift_back = 0;
  if constexpr (aligned_to_end<Cfg, Mask, kServing>())
    shift_back = (p.m_blocks * kCfg.block_m() - (p.seqlen_q << p.pack_shift)) & ~int64_t{63};
  w.m0 = static_cast<int32_t>(m_block * kCfg.block_m() - shift_back);
  const int64_t rows = (seq.len_q << p.pack_shift) - w.m0;
  w.rows = static_cast<int32_t>(rows < 0 ? 0 : rows < kCfg.block_m() ? rows : kCfg.block_m());
  int64_t n_begin = 0, n_end = 0;
  if (w.rows > 0) {
    int nb, ne;
    const int32_t first = aligned_to_end<Cfg, Mask, kServing>() && w.m0 < 0 ? 0 : w.m0;
    tile_band<Mask>(seq.len_q, seq.len_k, p.window_left, p.window_right)
        .key_blocks(first >> p.pack_shift, ((w.m0 + w.rows - 1) >> p.pack_shift) + 1, kCfg.block_n, &nb, &ne);
    n_begin = nb, n_end = ne;
    if constexpr (kServing) split_blocks(nb, ne, p.splits, w.split, &n_begin, &n_end);
  }
  w.n_begin = static_cast<int32_t>(n_begin), w.n_end = static_cast<int32_t>(n_end);
  w.tail = kServing && p.seqs.ragged_k() && n_end > n_begin && n_end * kCfg.block_n > seq.len_k;
  return w;
}

// One tile a CTA: tile blockIdx.x.
template <class Cfg>
struct SingleTileScheduler {
  template <class F>
  __device__ static void produce(const Smem<Cfg>&, const KernelParams&, int*, F&& fn) {
    fn(static_cast<int64_t>(blockIdx.x));
  }
  template <class F>
  __device__ static void consume(const Smem<Cfg>&, F&& fn) {
    fn(static_cast<int64_t>(blockIdx.x));
  }
};

// Persistent CTAs: tiles blockIdx.x, then gridDim.x + (a global counter's next value), handed
// from the producer warp to the consumers through a 2-slot ring in shared memory (-1 ends the
// CTA). Tiles run (batch, head or head group)-major, longest first within one, so the CTAs at
// work share K and V in L2 and the counter balances the causal mask's uneven tiles. counter[1]
// counts the CTAs done drawing; the last one puts both back to 0 for the stream's next launch.
template <class Cfg>
struct PersistentScheduler {
  // The producer warp (all 32 lanes): fn(tile) for each of the CTA's tiles.
  template <class F>
  __device__ static void produce(const Smem<Cfg>& sm, const KernelParams& p, int* counter, F&& fn) {
    const int lane = threadIdx.x % 32;
    int64_t tile = blockIdx.x;
    for (uint32_t k = 0;; ++k) {
      const int slot = k & 1;
      mbarrier_wait(sm.tile_empty(slot), ((k >> 1) & 1) ^ 1);
      if (lane == 0) {
        *sm.tile_slot(slot) = tile < p.tiles ? tile : -1;
        mbarrier_arrive(sm.tile_full(slot));  // release: the slot's value is seen by the waiters
      }
      if (tile >= p.tiles) {
        if (lane == 0) {
          __threadfence();  // this CTA's draws come before its count, and so before the reset
          if (atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
            __threadfence();
            atomicExch(counter, 0);
            atomicExch(counter + 1, 0);
          }
        }
        return;
      }
      fn(tile);
      int drawn = 0;
      if (lane == 0) drawn = atomicAdd(counter, 1);
      tile = gridDim.x + __shfl_sync(0xffffffffu, drawn, 0);
    }
  }

  // A consumer warpgroup: fn(tile) for each tile the producer hands out.
  template <class F>
  __device__ static void consume(const Smem<Cfg>& sm, F&& fn) {
    const int lane = threadIdx.x % 32;
    for (uint32_t k = 0;; ++k) {
      const int slot = k & 1;
      mbarrier_wait<false>(sm.tile_full(slot), (k >> 1) & 1);
      // From shared memory a value is per-thread to the compiler; the shuffle makes it warp-uniform
      // so the ring stages and wgmma descriptors derived from it stay in uniform registers (else
      // every wgmma pays an R2UR and vector integer math: measured 7-10% slower).
      const int64_t tile = __shfl_sync(0xffffffffu, *sm.tile_slot(slot), 0);
      if (lane == 0) mbarrier_arrive(sm.tile_empty(slot));
      if (tile < 0) return;
      fn(tile);
    }
  }
};

template <class Cfg>
using Scheduler =
    std::conditional_t<Cfg::kCfg.persistent, PersistentScheduler<Cfg>, SingleTileScheduler<Cfg>>;

}  // namespace tileattn::detail::sm90
