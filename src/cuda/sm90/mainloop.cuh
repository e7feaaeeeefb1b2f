// mainloop.cuh: the sm90 forward's loads and GEMMs. The producer warp issues TMA loads of Q and
// of K and V block by block into rings of stages on mbarriers (V from the other producer warps by
// cp.async in the decode config); each consumer warpgroup computes
// S = Q K^T (both from shared memory) and O += P V (P from registers) with wgmma, the softmax of
// block j running while P V of block j - 1 is on the tensor cores, and takes turns with the
// other consumers to issue its GEMMs (docs/kernels/sm90.md).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/kernel_params.h"
#include "cuda/common/math.cuh"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/gather.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

// A consumer's points on each tile, for tests/cuda_sm90/tune_sm90_fwd_probe.cu (nothing in the
// library's builds): 0 entry, 1 Q landed, 2 block 0's softmax done, 3 the steady steps done, 4
// the last P V done, 5 the skipped tail walked, 6 the epilogue issued; `own`: blocks computed.
#ifndef TILEATTN_SM90_TILE_PROBE
#define TILEATTN_SM90_TILE_PROBE(consumer, tile, point, own)
#endif

namespace tileattn::detail::sm90 {

// The producer warp on one tile: Q, then K and V block by block, lane 0 issuing. K runs one
// block ahead of V (K0, K1 V0, K2 V1, ...): the consumers need K j + 1 before they release V j.
// Persistent CTAs load K0 first (its slot frees once the last tile's scores are done) and Q
// once the consumers released the last tile's. A paged cache's block is boxes of page_box rows,
// lane i looking up and loading box i, or (kGather) rows gathered by cp.async (gather.cuh;
// kServing only). A ragged sequence's last V block: once it landed, the whole warp zeroes its
// rows past the keys and signals v_tail. With v_warps, V is the other warps' (load_v_tile).
template <class Cfg, bool kServing, bool kGather>
__device__ __forceinline__ void produce_tile(const Smem<Cfg>& sm, const KernelParams& p,
                                             const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                             const CUtensorMap* tm_v, const Work& w, const Pipe& pipe,
                                             bool v_warps) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  constexpr int kChunks = kCfg.head_dim / 64;
  const int lane = threadIdx.x % 32;
  // The K / V batch coordinate: a packed k is one long "batch" entry, a cache's is its row.
  const int32_t batch = !kServing ? w.b : p.seqs.cu_k ? 0 : p.kv_batch_idx ? p.kv_batch_idx[w.b] : w.b;
  const int32_t* const pages =
      kServing && p.page_table ? p.page_table + int64_t{w.b} * p.page_table_stride : nullptr;
  const int64_t blocks = w.blocks();
  Gather<kCfg.head_dim, kCfg.block_n> gathers;
  // A paged cache's block j: lane i's page is box i's (boxes past the keys read the last page the
  // sequence uses: their K rows are masked and their V rows zeroed, w.tail). Looked up two blocks
  // ahead of its K load, and V j reuses K j's, so the table's latency is off the loop's path (each
  // lookup before the load it feeds cost one L2 round trip per K and per V load).
  const int box = p.page_box, boxes = !kGather && pages ? kCfg.block_n / box : 0;
  auto page_of = [&](int64_t j) -> int32_t {
    if (lane >= boxes || j >= blocks) return 0;
    return pages[min(w.key(j, kCfg.block_n) + lane * box, w.k_start + w.len_k - 1) / p.page_size];
  };
  // A fresh barrier passes parity 1, so the first lap of a ring never waits for "empty".
  auto load = [&](const CUtensorMap* tm, uint64_t* full, uint64_t* empty, uint8_t* dst, uint32_t phase,
                  int64_t j, int32_t page) {
    const int32_t key = w.key(j, kCfg.block_n);
    if constexpr (kGather) {
      if (lane == 0) mbarrier_wait(empty, phase ^ 1);
      __syncwarp();
      const bool is_k = tm == tm_k;
      gathers.issue(dst, static_cast<const uint8_t*>(is_k ? p.k : p.v), is_k ? p.k_sb : p.v_sb,
                    is_k ? p.k_sl : p.v_sl, is_k ? p.k_sh : p.v_sh, w.hk, pages, p.page_size, key,
                    w.k_start + w.len_k, full, lane);
      return;
    }
    if (lane == 0) {
      mbarrier_wait(empty, phase ^ 1);
      mbarrier_arrive_expect_tx(full, kCfg.kv_bytes());
      if (!pages)
        for (int c = 0; c < kChunks; ++c)
          if constexpr (Cfg::kCfg.l2_hints)  // a tuning variant: the pair's K and V kept in L2
            tma_load_4d_hint(dst + c * kCfg.block_n * 128, tm, full, 64 * c, w.hk, key, batch,
                             l2_evict_last());
          else
            tma_load_4d(dst + c * kCfg.block_n * 128, tm, full, 64 * c, w.hk, key, batch);
    }
    __syncwarp();  // the stage is free and its bytes expected: each lane issues its box
    if (lane < boxes) {
      const int32_t slot = (key + lane * box) % p.page_size;
      for (int c = 0; c < kChunks; ++c)
        tma_load_4d(dst + (c * kCfg.block_n + lane * box) * 128, tm, full, 64 * c, w.hk, slot, page);
    }
  };
  auto load_k = [&](int64_t j, int32_t page) {
    const Slot<Cfg> s(pipe.ring + j);
    load(tm_k, sm.k_full(s.stage), sm.k_empty(s.stage), sm.k(s.stage), s.phase, j, page);
  };
  auto load_v = [&](int64_t j, int32_t page) {
    const Slot<Cfg> s(pipe.ring + j);
    load(tm_v, sm.v_full(s.stage), sm.v_empty(s.stage), sm.v(s.stage), s.phase, j, page);
  };
  // The pages of blocks j - 1 (V's), j (K's) and j + 1 at step j of the loop below.
  int32_t page_v = 0, page_k = page_of(0), page_next = page_of(1);
  // Q into its buffer once free: with one buffer (freed by the last tile's final P V) after K0,
  // with two (freed a tile earlier) first.
  const int qb = pipe.q_buffer<Cfg>();
  auto issue_q = [&] {
    if (lane == 0) {
      mbarrier_arrive_expect_tx(sm.q_full(qb), Cfg::kCfg.q_bytes());
      const int32_t q_batch = p.seqs.cu_q ? 0 : w.b;
      const int32_t q_head = w.h >> p.pack_shift, q_row = w.q_start + (w.m0 >> p.pack_shift);
      for (int c = 0; c < kChunks; ++c)
        if constexpr (Cfg::kCfg.l2_hints)  // a tuning variant: Q, read once, evicted first
          tma_load_5d_hint(sm.q(qb) + c * Cfg::kCfg.block_m() * 128, tm_q, sm.q_full(qb), 64 * c, 0, q_head,
                           q_row, q_batch, l2_evict_first());
        else
          tma_load_5d(sm.q(qb) + c * Cfg::kCfg.block_m() * 128, tm_q, sm.q_full(qb), 64 * c, 0, q_head, q_row,
                      q_batch);
    }
  };
  if constexpr (kCfg.q_buffers > 1) {
    if (lane == 0) mbarrier_wait(sm.q_empty(qb), pipe.q_phase<Cfg>() ^ 1);
    issue_q();
  }
  if constexpr (kCfg.persistent) {
    if (blocks > 0) load_k(0, page_k);
    if (kCfg.q_buffers == 1 && lane == 0) mbarrier_wait(sm.q_empty(), (pipe.tiles & 1) ^ 1);
  }
  if constexpr (kCfg.q_buffers == 1) issue_q();
  for (int64_t j = 0; j <= blocks; ++j) {
    if (j < blocks && !(kCfg.persistent && j == 0)) load_k(j, page_k);
    if (j > 0 && !v_warps) load_v(j - 1, page_v);
    page_v = page_k, page_k = page_next, page_next = page_of(j + 2);
  }
  if constexpr (kGather) gathers.flush(lane);
  __syncwarp();
  if (w.tail && !v_warps) {
    const Slot<Cfg> s(pipe.ring + blocks - 1);
    mbarrier_wait(sm.v_full(s.stage), s.phase);
    const int valid = w.len_k - (w.n_end - 1) * kCfg.block_n;  // keys of the sequence in the block
    constexpr int kRowUnits = 8 * kChunks;                     // 16-byte units of a row, all chunks
    uint8_t* const v = sm.v(s.stage);
    for (int idx = lane; idx < (kCfg.block_n - valid) * kRowUnits; idx += 32) {
      const int row = valid + idx / kRowUnits, c = idx % kRowUnits / 8, u = idx % 8;
      *reinterpret_cast<uint4*>(v + c * kCfg.block_n * 128 + row * 128 + 16 * u) = make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async();  // the zeros, visible to wgmma's reads
    __syncwarp();
    if (lane == 0) mbarrier_arrive(sm.v_tail());
  }
}

// Serving kernels' V warps (v_by_warps below): warps 1-3 of the producer warpgroup load the
// tile's V blocks from a contiguous cache by cp.async (gather.cuh, VWarps), each into its ring
// stage once the consumers released it.
template <class Cfg>
__device__ __forceinline__ void load_v_tile(const Smem<Cfg>& sm, const KernelParams& p, const Work& w,
                                            const Pipe& pipe) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  const int t = threadIdx.x - 32;
  const int32_t end = w.k_start + w.len_k;
  const int64_t batch = p.seqs.cu_k ? 0 : p.kv_batch_idx ? p.kv_batch_idx[w.b] : w.b;
  const uint8_t* const base = static_cast<const uint8_t*>(p.v) + 2 * (batch * p.v_sb + w.hk * p.v_sh);
  for (int64_t j = 0; j < w.blocks(); ++j) {
    const Slot<Cfg> s(pipe.ring + j);
    mbarrier_wait(sm.v_empty(s.stage), s.phase ^ 1);
    VWarps::issue<kCfg.head_dim, kCfg.block_n>(sm.v(s.stage), base, p.v_sl, w.key(j, kCfg.block_n), end,
                                               sm.v_full(s.stage), t);
  }
}

// Whether V comes from load_v_tile: the config asks for it, on a contiguous cache (paged ones
// load V by TMA boxes a page, or gathered with K).
template <class Cfg, bool kServing, bool kGather>
__device__ __forceinline__ bool v_by_warps(const KernelParams& p) {
  return Cfg::kCfg.v_by_warps && kServing && !kGather && p.page_table == nullptr;
}

// Turns between the consumers for issuing GEMMs (named barrier 1 + c is consumer c's turn; 0 is
// __syncthreads; 1 + consumers + c is consumer c's epilogue). A turn is 128 threads waiting plus
// the 128 of the previous consumer arriving. The last consumer hands consumer 0 the first turn.
// With one tile a CTA, it keeps its own last turn; persistent CTAs pass every turn and consumer
// 0 takes one more at the end. Either way every barrier completes as many phases as it is
// waited on.
template <class Cfg>
struct Turns {
  static constexpr int kN = Cfg::kCfg.consumers;
  static constexpr bool kOn = Cfg::kCfg.pingpong;
  int me;
  __device__ void start() const {
    if (kOn && me == kN - 1) named_arrive(1, 256);
  }
  __device__ void wait() const {
    if (kOn) named_sync(1 + me, 256);
  }
  __device__ void pass(bool last) const {
    if (kOn && !(!Cfg::kCfg.persistent && last && me == kN - 1)) named_arrive(1 + (me + 1) % kN, 256);
  }
  __device__ void finish() const {
    if (kOn && Cfg::kCfg.persistent && me == 0) named_sync(1, 256);
  }
};

// The GEMMs of one key block for a consumer's 64 rows.
template <class Cfg, class T>
struct Gemms {
  static constexpr TileConfig kCfg = Cfg::kCfg;
  static constexpr int kD = kCfg.head_dim, kN = kCfg.block_n;
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const Smem<Cfg>& sm;
  int consumer;
  int q_buffer;  // TileConfig::q_buffers

  // S = Q K^T, m64 nN, D / 16 k-steps; Q rows of this consumer start 64 rows into each chunk.
  __device__ __forceinline__ void scores(float* s, int stage) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const int c = kk / 4, within = 32 * (kk % 4);
      const uint64_t dq =
          make_smem_desc(sm.q(q_buffer) + (c * kCfg.block_m() + consumer * 64) * 128 + within, 16, 1024);
      const uint64_t dk = make_smem_desc(sm.k(stage) + c * kN * 128 + within, 16, 1024);
      WgmmaOp<kN, kBf16>::template ss<0>(s, dq, dk, kk > 0 ? 1u : 0u);
    }
    wgmma_commit();
  }
  // O += P V, m64 nD, N / 16 k-steps; V [key][d] is the N-major B operand (64-column chunks
  // N x 128 bytes apart, 16 keys = 2048 bytes per k-step).
  __device__ __forceinline__ void pv(float* o, const uint32_t (*pa)[4], int stage) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t dv = make_smem_desc(sm.v(stage) + 2048 * kk, kN * 128, 1024);
      WgmmaOp<kD, kBf16>::template rs<1>(o, pa[kk], dv, 1u);
    }
    wgmma_commit();
  }
};

// One lane per warp arrives on a ring's "empty" barrier (count: 4 x consumers).
__device__ __forceinline__ void release(uint64_t* empty, int lane) {
  if (lane == 0) mbarrier_arrive(empty);
}

// A consumer whose 64 rows all lie past the tile's rows (decoding: a few packed rows of 128 or
// 192): it waits for each stage, takes its turns and releases the stages like the others, but
// issues no GEMM, so the tensor cores serve the rows that exist. A path of its own, so the
// mainloop's wgmma pipeline stays branch-free. From step `first` on (K j and V j - 1 a step), it
// is also how a consumer walks the blocks past its rows (skip_masked_tail, consume_tile).
template <class Cfg>
__device__ __forceinline__ void idle_tile(const Smem<Cfg>& sm, const Work& w, const Turns<Cfg>& turn,
                                          const Pipe& pipe, int lane, bool v_warps, int64_t first = 0) {
  const int64_t blocks = w.blocks();
  if (blocks == 0) return;
  if (!Cfg::kCfg.persistent && first == 0) turn.start();
  for (int64_t j = first; j <= blocks; ++j) {
    if (j < blocks) {
      const Slot<Cfg> sk(pipe.ring + j);
      mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
    }
    if (j > 0) {
      const Slot<Cfg> sv(pipe.ring + j - 1);
      if (j == blocks && w.tail && !v_warps)
        mbarrier_wait<false>(sm.v_tail(), pipe.tails & 1);
      else
        mbarrier_wait<false>(sm.v_full(sv.stage), sv.phase);
    }
    turn.wait();
    turn.pass(j == blocks);
    if (j < blocks) release(sm.k_empty(Slot<Cfg>(pipe.ring + j).stage), lane);
    if (j > 0) release(sm.v_empty(Slot<Cfg>(pipe.ring + j - 1).stage), lane);
  }
}

// Of a tile's `blocks` key blocks of block_n keys, those a consumer computes under a mask: up to
// the last one its rows [rows_first, rows_first + 64) see, at least one (TileConfig's
// skip_masked_tail).
template <class Mask>
__device__ __forceinline__ int64_t own_blocks(const KernelParams& p, const Work& w, int rows_first,
                                              int64_t blocks, int block_n) {
  if (!Mask::kMasks) return blocks;
  const int last = min(rows_first + 63, w.m0 + w.rows - 1);
  int nb, ne;
  tile_band<Mask>(w.len_q, w.len_k, p.window_left, p.window_right)
      .key_blocks(rows_first >> p.pack_shift, (last >> p.pack_shift) + 1, block_n, &nb, &ne);
  const int64_t own = int64_t{ne} - w.n_begin;
  return own < 1 ? 1 : own < blocks ? own : blocks;
}

// A consumer warpgroup on one tile: 64 query rows against key blocks [n_begin, n_end), in the
// order S0 | softmax 0 | S1, PV0 | softmax 1 (under PV0) | S2, PV1 | ... | PV last | epilogue.
// V stages written by cp.async (v_warps) are fenced for the async proxy before wgmma reads them.
template <class Cfg, class T, class Mask, bool kServing>
__device__ __forceinline__ void consume_tile(const Smem<Cfg>& sm, const KernelParams& p,
                                             const CUtensorMap* tm_o, const Work& w, int consumer,
                                             const Pipe& pipe, bool v_warps) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  constexpr int kD = kCfg.head_dim, kN = kCfg.block_n;
  const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32;
  const int shift = p.pack_shift;
  const int rows_first = w.m0 + 64 * consumer;
  const int row0 = rows_first + 16 * warp + lane / 4;  // half 0; half 1 is row0 + 8
  BlockSoftmax<kN, Mask::kMasks, kCfg.softmax_chains> softmax{
      p,
      tile_band<Mask>(w.len_q, w.len_k, p.window_left, p.window_right),
      rows_first >> shift,
      (rows_first + 63) >> shift,
      {row0 >> shift, (row0 + 8) >> shift},
      lane % 4};
  const Gemms<Cfg, T> gemm{sm, consumer, pipe.q_buffer<Cfg>()};
  const Turns<Cfg> turn{consumer};

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
  float s[kN / 2];
  uint32_t pa[kN / 16][4];
  // Weights to wgmma A fragments: k-step kk packs accumulators 8 kk .. 8 kk + 7 in pairs.
  auto to_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = cuda::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  };
  const int k_first = w.n_begin * kN;

  TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 0, 0);
  const int qb = pipe.q_buffer<Cfg>();
  mbarrier_wait<false>(sm.q_full(qb), pipe.q_phase<Cfg>());
  TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 1, 0);
  const int64_t blocks = w.blocks();
  // Blocks [own, blocks) no row of this consumer sees: waited for, turned and released only.
  int64_t own = blocks;
  if constexpr (kCfg.skip_masked_tail) own = own_blocks<Mask>(p, w, rows_first, blocks, kN);
  // No rows: past the end, or before the start (tiles aligned to the end).
  if (64 * consumer >= w.rows || (aligned_to_end<Cfg, Mask, kServing>() && rows_first < 0)) {
    idle_tile<Cfg>(sm, w, turn, pipe, lane, v_warps);
  } else if (blocks > 0) {
    if constexpr (!kCfg.persistent) turn.start();
    {
      const Slot<Cfg> sk(pipe.ring);
      mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
      turn.wait();
      gemm.scores(s, sk.stage);
      turn.pass(false);
      wgmma_wait<0>();
      fence_operands<kN / 2>(s);
      release(sm.k_empty(sk.stage), lane);
      softmax(s, k_first);  // o is 0: alpha needs no applying
      to_fragments();
    }
    TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 2, own);
    for (int64_t j = 1; j < own; ++j) {
      const Slot<Cfg> sk(pipe.ring + j), sv(pipe.ring + j - 1);
      mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
      mbarrier_wait<false>(sm.v_full(sv.stage), sv.phase);
      if (v_warps) fence_proxy_async();
      turn.wait();
      gemm.scores(s, sk.stage);
      gemm.pv(o, pa, sv.stage);
      turn.pass(false);
      wgmma_wait<1>();  // S of block j is in; P V of block j - 1 may still run
      fence_operands<kN / 2>(s);
      release(sm.k_empty(sk.stage), lane);
      softmax(s, k_first + static_cast<int>(j) * kN);
      wgmma_wait<0>();
      fence_operands<kD / 2>(o);
      release(sm.v_empty(sv.stage), lane);
      // Conditional rescaling leaves alpha = 1 for most blocks: skip the multiplies when the
      // whole warp may (a warp-uniform branch).
      if (__any_sync(0xffffffffu, softmax.alpha[0] != 1.0f || softmax.alpha[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < kD / 2; ++i) o[i] *= softmax.alpha[(i >> 1) & 1];
      }
      to_fragments();
    }
    TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 3, own);
    {
      // The last block this consumer computes; with blocks past it, the K of the first of them
      // is waited for and released in the same turn (idle_tile's step `own`).
      const Slot<Cfg> sv(pipe.ring + own - 1), sk(pipe.ring + own);
      if (own == blocks && w.tail && !v_warps) {
        mbarrier_wait<false>(sm.v_tail(), pipe.tails & 1);  // landed, and its rows past the keys zeroed
      } else {
        mbarrier_wait<false>(sm.v_full(sv.stage), sv.phase);
        if (v_warps) fence_proxy_async();
      }
      if (own < blocks) mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
      turn.wait();
      gemm.pv(o, pa, sv.stage);
      turn.pass(own == blocks);
      wgmma_wait<0>();
      fence_operands<kD / 2>(o);
      release(sm.v_empty(sv.stage), lane);
      if (own < blocks) release(sm.k_empty(sk.stage), lane);
    }
    TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 4, own);
    if constexpr (kCfg.skip_masked_tail) idle_tile<Cfg>(sm, w, turn, pipe, lane, v_warps, own + 1);
    TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 5, own);
  }
  // Every GEMM reading this Q is done: with O apart or stored directly, the next tile's Q may
  // load now.
  if constexpr (kCfg.persistent && !kCfg.o_in_q()) release(sm.q_empty(qb), lane);
  const SoftmaxRow total[2] = {softmax.total(0), softmax.total(1)};
  Epilogue<Cfg, T, kServing>{sm, p, tm_o, consumer}.store(o, total, w);
  TILEATTN_SM90_TILE_PROBE(consumer, pipe.tiles, 6, own);
}

}  // namespace tileattn::detail::sm90
