// kernel.cuh: the sm90 forward kernel: TMA loads into K and V rings completing on mbarriers,
// wgmma for S = Q K^T (both from shared memory) and O += P V (P from registers), a producer
// warpgroup and two or three consumer warpgroups with setmaxnreg. Inside a consumer the
// softmax of block j runs while P V of block j - 1 is on the tensor cores; across consumers,
// turns on named barriers make one's softmax run under the other's GEMMs (docs/kernels/sm90.md).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "cuda/sm80/kernel_params.h"
#include "cuda/sm80/ptx.h"
#include "cuda/sm80/scores.h"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::detail::sm90 {

using sm80::KernelParams;
using sm80::ScoreTransform;

// Shared memory, carved from the 1024-aligned dynamic allocation: Q, the K ring, the V ring, O
// when it has its own (TileConfig::o_apart), then the barriers.
template <class Cfg>
struct Smem {
  static constexpr TileConfig kCfg = Cfg::kCfg;
  uint8_t* base;
  __device__ uint8_t* q() const { return base; }
  __device__ uint8_t* k(int stage) const { return base + kCfg.q_bytes() + stage * kCfg.kv_bytes(); }
  __device__ uint8_t* v(int stage) const { return k(kCfg.stages + stage); }
  __device__ uint8_t* o() const { return kCfg.o_apart() ? k(2 * kCfg.stages) : q(); }
  __device__ uint64_t* barriers() const { return reinterpret_cast<uint64_t*>(k(2 * kCfg.stages) + kCfg.o_bytes()); }
  // [0] Q full; per stage s: K full, V full (the loads landed), K empty, V empty (released).
  __device__ uint64_t* q_full() const { return barriers(); }
  __device__ uint64_t* k_full(int s) const { return barriers() + 1 + s; }
  __device__ uint64_t* v_full(int s) const { return barriers() + 1 + kCfg.stages + s; }
  __device__ uint64_t* k_empty(int s) const { return barriers() + 1 + 2 * kCfg.stages + s; }
  __device__ uint64_t* v_empty(int s) const { return barriers() + 1 + 3 * kCfg.stages + s; }
  // Persistent CTAs only: Q empty; the tile-index ring (2 slots) and its full / empty barriers.
  __device__ uint64_t* q_empty() const { return barriers() + 1 + 4 * kCfg.stages; }
  __device__ uint64_t* tile_full(int s) const { return barriers() + 2 + 4 * kCfg.stages + s; }
  __device__ uint64_t* tile_empty(int s) const { return barriers() + 4 + 4 * kCfg.stages + s; }
  __device__ int64_t* tile_slot(int s) const { return reinterpret_cast<int64_t*>(barriers() + 6 + 4 * kCfg.stages) + s; }
};

// The CTA's key block j (counted over all its tiles) sits in ring stage j % stages; the phase
// flips every lap.
template <class Cfg>
struct Slot {
  int stage;
  uint32_t phase;
  __device__ explicit Slot(int64_t j)
      : stage(static_cast<int>(j % Cfg::kCfg.stages)), phase(static_cast<uint32_t>((j / Cfg::kCfg.stages) & 1)) {}
};

// One tile: rows [m0, m0 + block_m) of query heads h .. h + pack - 1 in batch b, against key
// blocks [n_begin, n_end). Row r is position r >> pack_shift of head h + r % pack (GQA packing,
// tile_config.h; without packing rows are positions of head h).
struct Work {
  int64_t b, h, hk, m0;
  int64_t n_begin, n_end;
};

template <class Cfg, class Mask>
__device__ __forceinline__ Work work_of(const KernelParams& p, const Mask& mask, int64_t tile) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  Work w;
  // Later query tiles see more keys under a causal mask: they get the lower block indices.
  const int64_t m_block = p.m_blocks - 1 - tile % p.m_blocks;
  const int64_t bh = tile / p.m_blocks, heads = p.heads_q >> p.pack_shift;
  w.b = bh / heads;
  w.h = (bh % heads) << p.pack_shift;
  w.hk = w.h / p.group;
  w.m0 = m_block * kCfg.block_m();
  const int64_t rows = p.seqlen_q << p.pack_shift;
  const int64_t m1 = w.m0 + kCfg.block_m() < rows ? w.m0 + kCfg.block_m() : rows;
  key_block_range(mask, w.m0 >> p.pack_shift, ((m1 - 1) >> p.pack_shift) + 1, kCfg.block_n, &w.n_begin, &w.n_end);
  return w;
}

// Warpgroup 0, one thread: Q, then K and V block by block. K runs one block ahead of V (K0,
// K1 V0, K2 V1, ...): the consumers need K j + 1 before they release V j. `ring` counts the
// CTA's key blocks before this tile. Persistent CTAs load K0 first (its slot frees once the
// last tile's scores are done) and Q once the consumers released the last tile's.
template <class Cfg>
__device__ __forceinline__ void produce_tile(const Smem<Cfg>& sm, const KernelParams& p, const CUtensorMap* tm_q,
                                             const CUtensorMap* tm_k, const CUtensorMap* tm_v, const Work& w,
                                             int64_t ring, uint32_t tile_phase) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  constexpr int kChunks = kCfg.head_dim / 64;
  // A fresh barrier passes parity 1, so the first lap of a ring never waits for "empty".
  auto load = [&](const CUtensorMap* tm, uint64_t* full, uint64_t* empty, uint8_t* dst, uint32_t phase, int64_t j) {
    mbarrier_wait(empty, phase ^ 1);
    mbarrier_arrive_expect_tx(full, kCfg.kv_bytes());
    const int32_t key = static_cast<int32_t>((w.n_begin + j) * kCfg.block_n);
    for (int c = 0; c < kChunks; ++c)
      tma_load_4d(dst + c * kCfg.block_n * 128, tm, full, 64 * c, static_cast<int32_t>(w.hk), key,
                  static_cast<int32_t>(w.b));
  };
  auto load_k = [&](int64_t j) {
    const Slot<Cfg> s(ring + j);
    load(tm_k, sm.k_full(s.stage), sm.k_empty(s.stage), sm.k(s.stage), s.phase, j);
  };
  auto load_v = [&](int64_t j) {
    const Slot<Cfg> s(ring + j);
    load(tm_v, sm.v_full(s.stage), sm.v_empty(s.stage), sm.v(s.stage), s.phase, j);
  };
  const int64_t blocks = w.n_end - w.n_begin;
  if constexpr (kCfg.persistent) {
    if (blocks > 0) load_k(0);
    mbarrier_wait(sm.q_empty(), tile_phase ^ 1);
  }
  mbarrier_arrive_expect_tx(sm.q_full(), kCfg.q_bytes());
  for (int c = 0; c < kChunks; ++c)
    tma_load_5d(sm.q() + c * kCfg.block_m() * 128, tm_q, sm.q_full(), 64 * c, 0,
                static_cast<int32_t>(w.h >> p.pack_shift), static_cast<int32_t>(w.m0 >> p.pack_shift),
                static_cast<int32_t>(w.b));
  for (int64_t j = 0; j <= blocks; ++j) {
    if (j < blocks && !(kCfg.persistent && j == 0)) load_k(j);
    if (j > 0) load_v(j - 1);
  }
}

// Turns between the consumers for issuing GEMMs (named barrier 1 + c is consumer c's turn; 0 is
// __syncthreads; 1 + consumers + c is consumer c's epilogue). A turn is 128 threads waiting plus the 128 of the previous consumer arriving.
// The last consumer hands consumer 0 the first turn. With one tile a CTA, it keeps its own last
// turn; persistent CTAs pass every turn and consumer 0 takes one more at the end. Either way
// every barrier completes as many phases as it is waited on.
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

// Per consumer thread: where its rows are and the GEMMs of one key block. Thread (warp,
// g = lane / 4, q = lane % 4) holds rows 16 warp + g (half 0) and + 8 (half 1); accumulator i is
// in half (i >> 1) & 1 and column 8 (i >> 2) + 2 q + (i & 1) (HOPPER_FACTS B3).
template <class Cfg, class T>
struct Gemms {
  static constexpr TileConfig kCfg = Cfg::kCfg;
  static constexpr int kD = kCfg.head_dim, kN = kCfg.block_n;
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const Smem<Cfg>& sm;
  int consumer;

  // S = Q K^T, m64 nN, D / 16 k-steps; Q rows of this consumer start 64 rows into each chunk.
  __device__ __forceinline__ void scores(float* s, int stage) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const int c = kk / 4, within = 32 * (kk % 4);
      const uint64_t dq = make_smem_desc(sm.q() + (c * kCfg.block_m() + consumer * 64) * 128 + within, 16, 1024);
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

// A consumer warpgroup on one tile: 64 query rows against key blocks [n_begin, n_end), in the
// order S0 | softmax 0 | S1, PV0 | softmax 1 (under PV0) | S2, PV1 | ... | PV last | epilogue.
// `ring` counts the CTA's key blocks before this tile, `tile_phase` the parity of its Q.
template <class Cfg, class T, class Mask>
__device__ __forceinline__ void consume_tile(const Smem<Cfg>& sm, const KernelParams& p, const CUtensorMap* tm_o,
                                             const Mask& mask, const Work& w, int consumer, int64_t ring,
                                             uint32_t tile_phase) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  constexpr int kD = kCfg.head_dim, kN = kCfg.block_n;
  const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32;
  const int q = lane % 4;
  const int shift = p.pack_shift;
  const int64_t rows_first = w.m0 + 64 * consumer;
  const int64_t row0 = rows_first + 16 * warp + lane / 4;  // half 0; half 1 is row0 + 8
  // Positions (mask, LSE) of the consumer's rows and of this thread's two.
  const int64_t pos_first = rows_first >> shift, pos_last = (rows_first + 63) >> shift;
  const int64_t pos[2] = {row0 >> shift, (row0 + 8) >> shift};
  const Gemms<Cfg, T> gemm{sm, consumer};
  const Turns<Cfg> turn{consumer};

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
  float s[kN / 2];
  uint32_t pa[kN / 16][4];
  SoftmaxRow state[2];
  float alpha[2];

  // Scores of block j (in s, fp32) to weights in place: transform, mask, online softmax.
  auto softmax = [&](int64_t j) {
    const int64_t k0 = (w.n_begin + j) * kN;
    if (p.transform == ScoreTransform::kSoftcap) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) s[i] = sm80::tanh_via_ex2(s[i] * p.pre);
    } else if (p.transform == ScoreTransform::kNegate) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) s[i] = -s[i];
    }
    if (block_needs_mask(mask, pos_first, pos_last + 1, k0, kN)) {
      // Each of the thread's two rows sees columns [lo, hi) of this block (hi() stops at Lk).
      int lo[2], hi[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        lo[half] = static_cast<int>(imin(kN, imax(0, mask.lo(pos[half]) - k0)));
        hi[half] = static_cast<int>(imin(kN, imax(0, mask.hi(pos[half]) - k0)));
      }
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        const int col = 8 * (i >> 2) + 2 * q + (i & 1), half = (i >> 1) & 1;
        if (col < lo[half] || col >= hi[half]) s[i] = -INFINITY;
      }
    }
    float base[2], block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) block_max[(i >> 1) & 1] = fmaxf(block_max[(i >> 1) & 1], s[i]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // post > 0, so the max of t times post is the max of the logits (log2 units).
      alpha[half] = state[half].advance(sm80::quad_max(block_max[half]) * p.post, p.conditional);
      base[half] = state[half].base();
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const float t = fmaf(s[i], p.post, -base[(i >> 1) & 1]);  // one FFMA, then the exp unit
      s[i] = sm80::ex2(t);
      sum[(i >> 1) & 1] += s[i];
    }
    state[0].add(sum[0]);  // this thread's columns only; the quad's sum is taken at the end
    state[1].add(sum[1]);
  };
  // Weights to wgmma A fragments: k-step kk packs accumulators 8 kk .. 8 kk + 7 in pairs.
  auto to_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = sm80::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  };

  mbarrier_wait<false>(sm.q_full(), tile_phase);
  const int64_t blocks = w.n_end - w.n_begin;
  if (blocks > 0) {
    if constexpr (!kCfg.persistent) turn.start();
    {
      const Slot<Cfg> sk(ring);
      mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
      turn.wait();
      gemm.scores(s, sk.stage);
      turn.pass(false);
      wgmma_wait<0>();
      fence_operands<kN / 2>(s);
      release(sm.k_empty(sk.stage), lane);
      softmax(0);  // o is 0: alpha needs no applying
      to_fragments();
    }
    for (int64_t j = 1; j < blocks; ++j) {
      const Slot<Cfg> sk(ring + j), sv(ring + j - 1);
      mbarrier_wait<false>(sm.k_full(sk.stage), sk.phase);
      mbarrier_wait<false>(sm.v_full(sv.stage), sv.phase);
      turn.wait();
      gemm.scores(s, sk.stage);
      gemm.pv(o, pa, sv.stage);
      turn.pass(false);
      wgmma_wait<1>();  // S of block j is in; P V of block j - 1 may still run
      fence_operands<kN / 2>(s);
      release(sm.k_empty(sk.stage), lane);
      softmax(j);
      wgmma_wait<0>();
      fence_operands<kD / 2>(o);
      release(sm.v_empty(sv.stage), lane);
      // Conditional rescaling leaves alpha = 1 for most blocks: skip the multiplies when the
      // whole warp may (a warp-uniform branch).
      if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < kD / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
      }
      to_fragments();
    }
    {
      const Slot<Cfg> sv(ring + blocks - 1);
      mbarrier_wait<false>(sm.v_full(sv.stage), sv.phase);
      turn.wait();
      gemm.pv(o, pa, sv.stage);
      turn.pass(true);
      wgmma_wait<0>();
      fence_operands<kD / 2>(o);
      release(sm.v_empty(sv.stage), lane);
    }
  }
  // Every GEMM reading this Q is done: with O apart, the next tile's Q may load now.
  if constexpr (kCfg.o_apart()) release(sm.q_empty(), lane);

  // Epilogue. O / l goes into this consumer's 64 rows of O's staging (Q's own rows, whose last
  // S GEMM is done, or O's shared memory), as the 128-byte-swizzled rows TMA reads: 16-byte unit
  // u of row r sits at u ^ (r % 8), and r % 8 is this thread's lane / 4. Then one thread stores
  // the rows, 64 columns a box; positions past seqlen_q are clipped by the map. LSE is written
  // directly. Persistent CTAs first wait for the thread that stored the last tile's rows.
  const int epilogue_barrier = 1 + kCfg.consumers + consumer;
  if constexpr (kCfg.persistent) named_sync(epilogue_barrier, kWarpgroupThreads);
  uint8_t* const rows_smem = sm.o() + consumer * 64 * 128;
  const int g = lane / 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    SoftmaxRow total = state[half];
    total.l = sm80::quad_sum(state[half].l);
    // A row that saw no key is exactly 0, whatever the accumulators hold.
    const float inv_l = total.l == 0.0f ? 0.0f : total.inv_l();
    const int r = 16 * warp + g + 8 * half;
#pragma unroll
    for (int i = 2 * half; i < kD / 2; i += 4) {  // accumulators i, i + 1: columns 8 (i >> 2) + 2 q, + 1
      const float x0 = total.l == 0.0f ? 0.0f : o[i] * inv_l, x1 = total.l == 0.0f ? 0.0f : o[i + 1] * inv_l;
      uint8_t* dst = rows_smem + (i >> 5) * kCfg.block_m() * 128 + r * 128 + ((((i >> 2) & 7) ^ g) << 4) + 4 * q;
      *reinterpret_cast<uint32_t*>(dst) = sm80::pack2<T>(x0, x1);
    }
    if (p.lse && q == 0 && pos[half] < p.seqlen_q) {
      const int64_t head = w.h + ((row0 + 8 * half) & ((int64_t{1} << shift) - 1));
      p.lse[w.b * p.lse_sb + head * p.lse_sh + pos[half] * p.lse_sl] = total.lse();
    }
  }
  fence_proxy_async();  // the generic-proxy writes, visible to the TMA store
  named_sync(epilogue_barrier, kWarpgroupThreads);
  if (tid == 0) {
#pragma unroll
    for (int c = 0; c < kD / 64; ++c)
      tma_store_5d(tm_o, rows_smem + c * kCfg.block_m() * 128, 64 * c, 0, static_cast<int32_t>(w.h >> shift),
                   static_cast<int32_t>(pos_first), static_cast<int32_t>(w.b));
    tma_store_commit();
    tma_store_wait_read();  // the rows may be reused (or the CTA exit) once the store read them
    // Persistent CTAs, O in Q's rows: the next tile's Q may load into them now.
    if constexpr (kCfg.persistent && !kCfg.o_apart()) mbarrier_arrive(sm.q_empty());
  }
  __syncwarp();  // warp 0 converged again before any later bar.sync or wgmma
}

// Persistent CTAs: tiles blockIdx.x, then gridDim.x + (a global counter's next value), handed
// from the producer to the consumers through a 2-slot ring in shared memory (-1 ends the CTA).
// Tiles run (batch, head or head group)-major, longest first within one, so the CTAs at work
// share K and V in L2 and the counter balances the causal mask's uneven tiles. counter[1]
// counts the CTAs done drawing; the last one puts both back to 0 for the stream's next launch.
template <class Cfg, class Mask>
__device__ void produce_all(const Smem<Cfg>& sm, const KernelParams& p, const Mask& mask, const CUtensorMap* tm_q,
                            const CUtensorMap* tm_k, const CUtensorMap* tm_v, int* tile_counter) {
  int64_t ring = 0, tile = blockIdx.x;
  for (uint32_t k = 0;; ++k) {
    const int slot = k & 1;
    mbarrier_wait(sm.tile_empty(slot), ((k >> 1) & 1) ^ 1);
    *sm.tile_slot(slot) = tile < p.tiles ? tile : -1;
    mbarrier_arrive(sm.tile_full(slot));  // release: the slot's value is seen by the waiters
    if (tile >= p.tiles) {
      __threadfence();  // this CTA's draws come before its count, and so before the reset
      if (atomicAdd(tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        __threadfence();
        atomicExch(tile_counter, 0);
        atomicExch(tile_counter + 1, 0);
      }
      return;
    }
    const Work w = work_of<Cfg>(p, mask, tile);
    produce_tile<Cfg>(sm, p, tm_q, tm_k, tm_v, w, ring, k & 1);
    ring += w.n_end - w.n_begin;
    tile = gridDim.x + atomicAdd(tile_counter, 1);
  }
}

template <class Cfg, class T, class Mask>
__device__ void consume_all(const Smem<Cfg>& sm, const KernelParams& p, const CUtensorMap* tm_o, const Mask& mask,
                            int consumer) {
  const Turns<Cfg> turn{consumer};
  const int lane = threadIdx.x % 32;
  turn.start();
  int64_t ring = 0;
  for (uint32_t k = 0;; ++k) {
    const int slot = k & 1;
    mbarrier_wait<false>(sm.tile_full(slot), (k >> 1) & 1);
    // From shared memory a value is per-thread to the compiler; the shuffle makes it warp-uniform
    // so the ring stages and wgmma descriptors derived from it stay in uniform registers (else
    // every wgmma pays an R2UR and vector integer math: measured 7-10% slower).
    const int64_t tile = __shfl_sync(0xffffffffu, *sm.tile_slot(slot), 0);
    release(sm.tile_empty(slot), lane);
    if (tile < 0) break;
    const Work w = work_of<Cfg>(p, mask, tile);
    consume_tile<Cfg, T>(sm, p, tm_o, mask, w, consumer, ring, k & 1);
    ring += w.n_end - w.n_begin;
  }
  turn.finish();
}

template <class Cfg, class T, class Mask>
__global__ void __launch_bounds__(Cfg::kCfg.threads(), 1)
    attention_fwd_sm90(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                       const KernelParams p, const Mask mask,
                       int* tile_counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr TileConfig kCfg = Cfg::kCfg;
  extern __shared__ uint8_t smem_raw[];
  const Smem<Cfg> sm{reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023})};
  Work w{};
  if constexpr (!kCfg.persistent) w = work_of<Cfg>(p, mask, blockIdx.x);
  if (threadIdx.x == 0) {
    mbarrier_init(sm.q_full(), 1);
    for (int s = 0; s < kCfg.stages; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.k_empty(s), 4 * kCfg.consumers);
      mbarrier_init(sm.v_empty(s), 4 * kCfg.consumers);
    }
    if constexpr (kCfg.persistent) {
      // Released by every consumer warp, or with O in Q's rows, by each consumer's storing thread.
      mbarrier_init(sm.q_empty(), kCfg.o_apart() ? 4 * kCfg.consumers : kCfg.consumers);
      for (int s = 0; s < 2; ++s) {
        mbarrier_init(sm.tile_full(s), 1);
        mbarrier_init(sm.tile_empty(s), 4 * kCfg.consumers);
      }
    }
    fence_barrier_init();
  }
  __syncthreads();
  const int wg = warpgroup_index();
  if (wg == 0) {
    warpgroup_reg_dealloc<kCfg.producer_regs()>();
    if (threadIdx.x == 0) {
      tma_prefetch_descriptor(&tm_q);
      tma_prefetch_descriptor(&tm_k);
      tma_prefetch_descriptor(&tm_v);
      if constexpr (kCfg.persistent)
        produce_all<Cfg>(sm, p, mask, &tm_q, &tm_k, &tm_v, tile_counter);
      else
        produce_tile<Cfg>(sm, p, &tm_q, &tm_k, &tm_v, w, 0, 0);
    }
  } else {
    warpgroup_reg_alloc<kCfg.consumer_regs()>();
    if constexpr (kCfg.persistent)
      consume_all<Cfg, T>(sm, p, &tm_o, mask, wg - 1);
    else
      consume_tile<Cfg, T>(sm, p, &tm_o, mask, w, wg - 1, 0, 0);
  }
#endif
}

}  // namespace tileattn::detail::sm90
