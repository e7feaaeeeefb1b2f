// balance.cuh: balanced split-KV for the persistent sm90 kernel. With fixed splits every CTA
// streams one run of key blocks, and the launch lasts as long as its slowest CTA: on an H200
// the last CTAs of a decode wave finish 7-10% after the median one, whole KV heads at a time
// (their SMs' share of the memory system, not their work; docs/kernels/sm90.md). Here a tile's
// key blocks are handed out at run time instead: each persistent CTA starts on a home tile and
// draws `chunk` blocks at a time from the tile's word in global memory, and once that tile's
// blocks are gone it joins the next tile that still has some, so faster CTAs stream more. Each
// visit of a CTA to a tile is one split of it: its partial state goes to the split slot it drew,
// and the consumer that brings the tile's finished blocks to its total merges the slots
// (epilogue.cuh). The splits' sums then depend on which CTA drew what: the output can differ
// from run to run within rounding, so Options::deterministic keeps the fixed splits.
#pragma once

#include <cstdint>

#include "cuda/common/kernel_params.h"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem.cuh"

namespace tileattn::detail::sm90 {

// A tile's word (KernelParams::draws): blocks handed out in the low half, visits begun above.
__device__ __forceinline__ unsigned long long load_word(const unsigned long long* word) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  return v;
}
__device__ __forceinline__ int32_t word_blocks(unsigned long long v) {
  return static_cast<int32_t>(v & 0xffffffffu);
}
__device__ __forceinline__ int32_t word_visits(unsigned long long v) { return static_cast<int32_t>(v >> 32); }

// Whether a visit may begin: blocks are left (a tile of none gets one visit, which writes its
// empty state) and a split slot is free.
__device__ __forceinline__ bool word_open(unsigned long long v, int32_t total, int splits) {
  return word_visits(v) < splits && (word_blocks(v) < total || (total == 0 && word_visits(v) == 0));
}

// What one tile's loads came to: the blocks (the rings advance by them) and whether the
// sequence's ragged last block was one (v_tail's phase).
struct Visited {
  int32_t blocks;
  bool tail;
};

// The producer's key blocks of one tile, the same in every lane: its run [cur, end) in order,
// or with balanced splits (p.draws), chunks of the tile's blocks drawn from its word one chunk
// ahead, so the atomic's latency hides under the current chunk's loads. Little state of its
// own: the producer runs on few registers.
struct BlockStream {
  int32_t cur, end;  // the chunk being loaded (absolute block indices)
  int32_t drawn;     // lane 0, balanced: the next chunk's first block relative to n_begin

  __device__ static BlockStream run(const Work& w) { return BlockStream{w.n_begin, w.n_end, 0}; }
  __device__ bool empty() const { return cur >= end; }
  __device__ static int32_t draw(const KernelParams& p, const Work& w) {
    return word_blocks(atomicAdd(p.draws + w.group, static_cast<unsigned long long>(p.chunk)));
  }
  // The next block, and whether it is the tile's last.
  template <bool kBalanced>
  __device__ int32_t take(const KernelParams& p, const Work& w, bool* last, int lane) {
    const int32_t block = cur++;
    if (kBalanced && cur == end) {
      const int32_t next = __shfl_sync(0xffffffffu, drawn, 0);
      if (next < w.blocks()) {
        cur = w.n_begin + next, end = w.n_begin + min(next + p.chunk, w.blocks());
        if (lane == 0) drawn = draw(p, w);
      }
    }
    *last = cur == end;
    return block;
  }
};

// Lane 0: begins a visit to the tile whose word is `word`, unless it closed. *seen: the word
// before this visit (its slot and first block).
__device__ __forceinline__ bool claim_visit(unsigned long long* word, int32_t total, int splits, int chunk,
                                            unsigned long long* seen) {
  unsigned long long old = load_word(word);
  while (word_open(old, total, splits)) {
    const unsigned long long want =
        old + (1ull << 32) + static_cast<unsigned long long>(total > 0 ? chunk : 0);
    const unsigned long long was = atomicCAS(word, old, want);
    if (was == old) {
      *seen = old;
      return true;
    }
    old = was;
  }
  return false;
}

// Named barrier 0 is __syncthreads, 1 .. 2 x consumers the turns and epilogues (mainloop.cuh):
// the consumers arrive on this one when their last tile is done.
constexpr int done_barrier(const TileConfig& c) { return 1 + 2 * c.consumers; }

// The producer warp: the CTA's visits, in tile order from its home tile (blockIdx.x modulo the
// tiles), each tile looked at once: the 32 lanes read 32 tiles' words at a time, and lane 0
// claims a visit to each open one in turn. fn(tile, work, blocks) loads one visit; its tile index
// (unsplit tile x splits + slot) goes to the consumers through the tile ring, as the persistent
// scheduler's do, and -1 ends them. The last CTA out (its consumers done) puts the words back to 0.
template <class Cfg, class Mask>
struct BalancedScheduler {
  template <class F>
  __device__ static void produce(const Smem<Cfg>& sm, const KernelParams& p, int* counter, F&& fn) {
    const int lane = threadIdx.x % 32;
    const int32_t tiles = static_cast<int32_t>(p.tiles / p.splits),
                  home = static_cast<int32_t>(blockIdx.x % tiles);
    uint32_t handed = 0;
    auto hand = [&](int64_t tile) {
      const int slot = handed & 1;
      mbarrier_wait(sm.tile_empty(slot), ((handed >> 1) & 1) ^ 1);
      if (lane == 0) {
        *sm.tile_slot(slot) = tile;
        mbarrier_arrive(sm.tile_full(slot));  // release: the slot's value is seen by the waiters
      }
      ++handed;
    };
    // Tiles home + off onwards (modulo tiles) are still to be looked at; only `off` lives across
    // a visit.
    for (int32_t off = 0; off < tiles;) {
      const int32_t mine = (home + off + lane) % tiles;
      int32_t total = -1;  // -1: past the tiles, or a tile past its sequence's rows
      bool open = false;
      if (off + lane < tiles) {
        const Work w = work_of<Cfg, Mask, true>(p, int64_t{mine} * p.splits);
        if (w.rows > 0) total = w.blocks(), open = word_open(load_word(p.draws + mine), total, p.splits);
      }
      const uint32_t ballot = __ballot_sync(0xffffffffu, open);
      if (ballot == 0) {
        off += 32;
        continue;
      }
      const int src = __ffs(ballot) - 1;
      const int32_t tile = __shfl_sync(0xffffffffu, mine, src),
                    tile_total = __shfl_sync(0xffffffffu, total, src);
      off += src + 1;
      unsigned long long seen = 0;
      const bool got = __shfl_sync(
          0xffffffffu, lane == 0 && claim_visit(p.draws + tile, tile_total, p.splits, p.chunk, &seen), 0);
      if (!got) continue;
      seen = __shfl_sync(0xffffffffu, seen, 0);
      const int64_t split_tile = int64_t{tile} * p.splits + word_visits(seen);
      const Work w = work_of<Cfg, Mask, true>(p, split_tile);
      BlockStream blocks{w.n_begin + word_blocks(seen),
                         w.n_begin + min(word_blocks(seen) + p.chunk, tile_total), 0};
      if (lane == 0 && !blocks.empty()) blocks.drawn = BlockStream::draw(p, w);
      hand(split_tile);
      fn(w, blocks);
    }
    hand(-1);
    // The consumers' merges read the words: the count waits until this CTA's are done.
    named_sync(done_barrier(Cfg::kCfg), 32 + 128 * Cfg::kCfg.consumers);
    bool last = false;
    if (lane == 0) {
      __threadfence();  // this CTA's draws come before its count, and so before the reset
      last = atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1;
    }
    if (__shfl_sync(0xffffffffu, last, 0)) {
      __threadfence();
      for (int64_t t = lane; t < tiles; t += 32) p.draws[t] = 0;
      if (lane == 0) atomicExch(counter + 1, 0);
    }
  }
};

}  // namespace tileattn::detail::sm90
