// bwd_kernel.cuh: the sm90 backward kernel (DESIGN.md section 7): one CTA per (batch, KV head,
// bwd_block_n keys), 384 threads: two consumer warpgroups and a producer warpgroup (setmaxnreg:
// 24 registers for it, 240 for the consumers). The producer's first warp loads
// (bwd_loader.cuh): K and V once (TMA), then Q, dO (TMA) and the lse2 / dsum rows of every step
// into its stages (full / empty mbarriers; bwd_smem.cuh: two, one at D = 256), zeroing the rows
// of a varlen block past its sequence; one lane of its second warp adds the consumers' dQ into
// dq_accum from the staging buffers (full / empty mbarriers) and, in deterministic mode, waits
// for each addition's turn, so neither the loads nor the dQ order sit on the consumers' path. A
// step is one query head of the group and one block of block_m query rows that sees the keys
// (bwd.h: 64 at D = 128 and 256, 128 at D = 64). At D = 64 and 128, each consumer owning 64 of
// the 128 keys (bwd_consumer below; D = 256: bwd_pair.cuh):
//   S^T = K Q^T, dP^T = V dO^T (wgmma m64 x block_m, both operands from shared memory);
//   P^T = exp2(S^T post - lse2), dS^T = P^T (dP^T - dsum) (softcap: times 1 - tanh^2), in
//   registers; dV += P^T dO and dK += dS^T Q (wgmma with A from registers, m64nD);
//   dS^T written to shared memory as dS [query][key]; dQ = dS K over all 128 keys, each
//   warpgroup one 64 x 64 part (bwd_layout.h: D's halves at D = 128, the rows' halves at D =
//   64), staged in fp32 and added into the fp32 dq_accum with one bulk reduction
//   (cp.reduce.async.bulk .add.f32) a step; with dq_order the additions to a query block run
//   in key-block order (deterministic mode).
// dK and dV stay in registers over the steps and are written once at the end. A tuning variant
// (kPersistent) runs one CTA an SM over the tiles.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "cuda/common/kernel_params.h"
#include "cuda/common/math.cuh"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_loader.cuh"
#include "cuda/sm90/bwd_ops.cuh"
#include "cuda/sm90/bwd_order.h"
#include "cuda/sm90/bwd_pair.cuh"
#include "cuda/sm90/bwd_smem.cuh"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::detail::sm90 {

// Points of a CTA's timeline, marked by Tuning::mark(point) from the threads of the role that
// reaches them (tests/cuda_sm90/tune_sm90_bwd_probe.cu records them).
enum BwdProbePoint { kEntered, kKvReady, kFirstStepReady, kStepsDone, kDkDvStored, kDqWritten, kLoadsIssued };
// The kernel's tuning knobs (tests/cuda_sm90/tune_sm90_bwd*.cu derive variants): the library's
// kernels take these, whose marks compile to nothing. kStageDkDv (D = 64 and 128, one CTA a
// tile; the library's choice, measured 1.07-1.17x at L <= 1k, within 2% at 16k): dK and dV
// through the free Q / dO stages, 16-byte row stores (bwd_store_staged); off, 4-byte stores
// straight from the accumulators (the persistent walk's, whose stages hold the next tile's).
struct BwdTuning {
  static constexpr bool kStageDkDv = true;
  __device__ static void mark(BwdProbePoint) {}
};

// A consumer's dK (times scale) and dV for its 64 keys (k0 on: keys past len_k not written)
// through `tile` (2 x 64 x kD elements of shared memory no other role uses now): each thread's
// accumulator pairs into rows of swizzled 16-byte chunks (bwd_layout.h: dkdv_stage_offset), the
// warpgroup's barrier (bar_id), then 16 bytes of a row a thread.
template <int kD, class T>
__device__ __forceinline__ void bwd_store_staged(const float (&dk)[kD / 2], const float (&dv)[kD / 2],
                                                 T* tile, int bar_id, float scale, T* dk_out, int64_t dk_sl,
                                                 T* dv_out, int64_t dv_sl, int k0, int len_k) {
  constexpr int kChunks = kD / 8;
  const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32;
  const auto at = [](int r, int c) { return dkdv_stage_offset(r, c, kD); };
#pragma unroll
  for (int e = 0; e < kD / 2; e += 2) {
    const int r = acc_row(e, warp, lane), c = acc_col(e, lane);
    *reinterpret_cast<uint32_t*>(tile + at(r, c)) = cuda::pack2<T>(dk[e] * scale, dk[e + 1] * scale);
    *reinterpret_cast<uint32_t*>(tile + 64 * kD + at(r, c)) = cuda::pack2<T>(dv[e], dv[e + 1]);
  }
  named_sync(bar_id, kWarpgroupThreads);
#pragma unroll 4
  for (int i = tid; i < 2 * 64 * kChunks; i += kWarpgroupThreads) {
    const int grad = i / (64 * kChunks), r = i / kChunks % 64, c = 8 * (i % kChunks);
    if (k0 + r >= len_k) continue;
    T* out = grad == 0 ? dk_out + (k0 + r) * dk_sl : dv_out + (k0 + r) * dv_sl;
    *reinterpret_cast<uint4*>(out + c) = *reinterpret_cast<const uint4*>(tile + grad * 64 * kD + at(r, c));
  }
}

// Lane 0 of the producer's second warp: each step's dQ staging, once both consumers have
// written it, added into dq_accum by one bulk reduction, the buffer released once the
// reduction has read it. Deterministic mode: each addition waits for its turn in the query
// block's order (polling with a short sleep, so the spin takes few issue slots from the
// consumers beside it) and raises the counter once the addition is complete (or at the next
// addition: bwd_order.h).
template <class Smem, class Mask, bool kVarlen>
__device__ __forceinline__ void bwd_dq_writer(const Smem& sm, const BwdParams& p, const BwdSeq& seq,
                                              const BwdSteps& st, int n_block, bool defer,
                                              const BwdRing& ring) {
  constexpr int kM = Smem::kM, kD = Smem::kDim;
  const cuda::KernelParams& f = p.f;
  const DqOrder dq_order{Mask::kMasks};  // read only in deterministic mode
  const int len_q = seq.len_q;
  const TileBand band = tile_band<Mask>(len_q, seq.len_k, f.window_left, f.window_right);
  int* raise = nullptr;  // deferred: the counter to raise at the next addition
  for (int64_t i = 0; i < st.count; ++i) {
    const int64_t step = ring.step0 + i;  // the CTA's step
    const int buf = static_cast<int>(step % Smem::kDqBuffers);
    mbarrier_wait(sm.dq_full(buf), static_cast<uint32_t>((step / Smem::kDqBuffers) & 1));
    const int64_t h = st.head(i);
    const int m = st.block(i), q0 = m * kM;
    const int64_t tile = p.dq_tiles.tile<kVarlen>(st.b, h, m);
    float* dst = p.dq_accum + tile * kM * kD;
    int* order = p.dq_order ? p.dq_order + tile : nullptr;
    if (order) {                       // after the key blocks before this one in the query block's order
      if (raise) release_turn(raise);  // the last addition
      raise = nullptr;
      int nb = 0, ne = 0;
      band.key_blocks(q0, min(q0 + kM, len_q), Smem::kN, &nb, &ne);
      const int turn = dq_order.turn(n_block, nb, ne);
      const uint32_t start = static_cast<uint32_t>(clock());
      while (load_acquire(order) != turn) {
        __nanosleep(32);
        if (static_cast<uint32_t>(clock()) - start > kHangCycles) hang_trap();  // a turn that never comes
      }
      fence_proxy_async_global();
    }
    bulk_reduce_add_f32(dst, sm.dq(buf), kM * kD * 4);
    tma_store_commit();
    tma_store_wait_read();  // the buffer back to the consumers before waiting for the writes
    mbarrier_arrive(sm.dq_empty(buf));
    if (order && defer)
      raise = order;
    else if (order)
      release_turn(order);
  }
  // The last addition complete (its writes performed), before the CTA ends or, in deterministic
  // mode, raises its turn; a persistent CTA's next tile needs neither.
  if (p.dq_order != nullptr || !ring.more) bulk_wait_all();
  if (raise) release_turn(raise);
}

// A consumer warpgroup: its 64 keys' dK and dV over the steps, and its part of each step's dQ.
template <class Smem, class T, class Mask, class Tuning = BwdTuning, bool kStaged = Tuning::kStageDkDv>
__device__ __forceinline__ void bwd_consumer(const Smem& sm, const BwdParams& p, const BwdSeq& seq, int w,
                                             int n_block, const BwdSteps& st, const BwdRing& ring) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kD = Smem::kDim, kM = Smem::kM, kE = kM / 2;  // S^T's elements a thread: 64 keys x kM queries
  using Bits = std::conditional_t<(kE > 32), uint64_t, uint32_t>;
  const cuda::KernelParams& f = p.f;
  const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32;
  const int len_q = seq.len_q, len_k = seq.len_k;
  constexpr int kN = Smem::kN;
  const int k0 = n_block * kN;
  const TileBand band = tile_band<Mask>(len_q, len_k, f.window_left, f.window_right);
  const bool softcap = f.transform == cuda::ScoreTransform::kSoftcap;
  // dQ = dS K over all 128 keys: this warpgroup's 64 x 64 part, rows dq_row on of dS and the
  // 64 columns of K's chunk dq_col / 64.
  const int dq_row = dq_part_row(w, kD), dq_col = dq_part_col(w, kD);

  float dk[kD / 2], dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dk[i] = dv[i] = 0.0f;
  mbarrier_wait<false>(sm.kv_full(), ring.tile & 1);
  Tuning::mark(kKvReady);

  for (int64_t i = 0; i < st.count; ++i) {
    const int64_t step = ring.step0 + i;  // the CTA's step
    const int stage = static_cast<int>(step % Smem::kStages);
    const uint32_t phase = static_cast<uint32_t>((step / Smem::kStages) & 1);
    const int q0 = st.block(i) * kM;
    mbarrier_wait<false>(sm.qdo_full(stage), phase);
    if (i == 0) Tuning::mark(kFirstStepReady);
    const float* lse2 = sm.rows(stage);
    const float* dsum = lse2 + kM;
    float s[kE], dp[kE];
    gemm_rows<kD, kM, kBf16>(s, sm.k() + 64 * w * 128, kN, sm.q(stage));      // S^T = K Q^T
    gemm_rows<kD, kM, kBf16>(dp, sm.v() + 64 * w * 128, kN, sm.dout(stage));  // dP^T = V dO^T

    // Rows are keys, columns queries: key j is seen by query i iff j - hi < i <= j - lo. Bit e
    // of `seen` says whether element e is, set before the element loops, which load lse2 and
    // dsum unconditionally and select after: a load under the mask's condition became a
    // branch whose phi copies moved accumulators between wgmmas, and ptxas serialized them
    // (C7511 / C7517).
    const bool masked =
        q0 + kM > len_q || k0 + kN > len_k || band.needs_mask(q0, min(q0 + kM, len_q), k0, kN, Mask::kMasks);
    Bits seen = ~Bits{0};
    if (masked) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int key = k0 + 64 * w + acc_row(e, warp, lane), c = acc_col(e, lane);
        if (!(key < len_k && c < len_q - q0 && c >= key - band.hi + 1 - q0 && c < key - band.lo + 1 - q0))
          seen &= ~(Bits{1} << e);
      }
    }
    const auto prob_at = [&](int e, float t) {  // P^T of element e from its transformed score
      const float prob = cuda::ex2(fmaf(t, f.post, -lse2[acc_col(e, lane)]));
      return (seen >> e) & 1 ? prob : 0.0f;
    };
    // P^T once S^T has landed, while dP^T is still in the tensor cores; dS^T = P^T (dP^T - dsum)
    // after it lands, while dV's GEMM runs. With softcap dS^T needs tanh's 1 - t^2, and at kM =
    // 128 P^T's fragments beside S^T, dP^T, dK and dV would take 224 registers, so there both
    // are awaited and dS^T computed beside P^T. Every path waits for dP^T before reading it
    // (ptxas serializes all the wgmmas where one path might read a pending accumulator).
    constexpr bool kBothFirst = kM > 64;
    const bool negate = f.transform == cuda::ScoreTransform::kNegate;
    if (softcap) {
      wgmma_wait<0>();
      fence_operands<kE>(s);
      fence_operands<kE>(dp);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float t = cuda::tanh_via_ex2(s[e] * f.pre), prob = prob_at(e, t);
        s[e] = prob;
        const float ds = prob * (dp[e] - dsum[acc_col(e, lane)]) * (1.0f - t * t);
        dp[e] = (seen >> e) & 1 ? ds : 0.0f;
      }
    } else if (kBothFirst) {
      wgmma_wait<0>();
      fence_operands<kE>(s);
      fence_operands<kE>(dp);
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        s[e] = prob_at(e, negate ? -s[e] : s[e]);
        const float ds = s[e] * (dp[e] - dsum[acc_col(e, lane)]);
        dp[e] = (seen >> e) & 1 ? ds : 0.0f;
      }
    } else {
      wgmma_wait<1>();
      fence_operands<kE>(s);
#pragma unroll
      for (int e = 0; e < kE; ++e) s[e] = prob_at(e, negate ? -s[e] : s[e]);
    }
    uint32_t fp[kM / 16][4], fs[kM / 16][4];
    pack_frag<T>(fp, s);
    wgmma_fence();
    gemm_frag<kD, kM, kBf16>(dv, fp, sm.dout(stage));  // dV += P^T dO
    wgmma_commit();
    wgmma_wait<1>();  // dP^T (where dS^T was computed above, long since)
    fence_operands<kE>(dp);
    if (!softcap && !kBothFirst) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float ds = s[e] * (dp[e] - dsum[acc_col(e, lane)]);
        dp[e] = (seen >> e) & 1 ? ds : 0.0f;
      }
    }
    pack_frag<T>(fs, dp);
    // dS^T into dS [query][key], this warpgroup's keys in chunk w (the A operand of dQ = dS K).
    // Four stmatrix .trans a thread, each 8 x 8 block of keys by queries stored as 8 query rows
    // of 16 bytes (bwd_layout.h).
    const uint32_t ds_base = smem_addr(sm.ds() + w * kM * 128);
#pragma unroll
    for (int m = 0; m < kM / 16; ++m)
      stmatrix_x4_trans(ds_base + ds_stmatrix_offset(m, warp, lane), fs[m][0], fs[m][1], fs[m][2], fs[m][3]);
    wgmma_fence();
    gemm_frag<kD, kM, kBf16>(dk, fs, sm.q(stage));  // dK += dS^T Q
    wgmma_commit();
    fence_proxy_async();
    named_sync(1, 2 * kWarpgroupThreads);  // both halves of dS written
    // dQ's part: 64 x 64 (32 registers), or at 80 rows dQ^T's 64 columns of D by the 80 rows
    // (K^T as an M-major A, dS's rows as a K-major B; 40 registers).
    constexpr int kDqRegs = Smem::kDqT ? kM / 2 : 32;
    float dq[kDqRegs];
    if constexpr (Smem::kDqT) {  // dV's GEMM done (dK's may run on): P^T's fragments free for dQ's 40
      wgmma_wait<1>();           // registers, else ptxas serializes every wgmma (C7512)
      fence_operands<kD / 2>(dv);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {  // keys 16 kk on
      const uint64_t d_s =
          make_smem_desc(sm.ds() + (kk / 4) * kM * 128 + dq_row * 128 + 32 * (kk % 4), 16, 1024);
      const uint64_t d_k = make_smem_desc(sm.k() + dq_col / 64 * kN * 128 + 2048 * kk, kN * 128, 1024);
      if constexpr (Smem::kDqT)
        WgmmaOp<kM, kBf16>::template ss<0, 1>(dq, d_k, d_s, kk > 0 ? 1u : 0u);
      else
        WgmmaOp<64, kBf16>::template ss<1>(dq, d_s, d_k, kk > 0 ? 1u : 0u);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands<kD / 2>(dk);
    fence_operands<kD / 2>(dv);
    fence_operands<kDqRegs>(dq);

    // Every GEMM of this step has read dS, Q and dO: dS may be written again once the other
    // consumer's GEMMs have read it too, and the stage goes back to the loader. Every consumer
    // thread arrives, after its own warpgroup's GEMMs (the loader's lanes then overwrite the
    // rows each of them read).
    named_sync(2, 2 * kWarpgroupThreads);
    mbarrier_arrive(sm.qdo_empty(stage));
    // dQ into part w of the staging buffer the writer has released, in the accumulators' order
    // (bwd_layout.h: dq_accum_pos), 512 contiguous bytes a warp's store.
    const int buf = static_cast<int>(step % Smem::kDqBuffers);
    mbarrier_wait<false>(sm.dq_empty(buf), static_cast<uint32_t>((step / Smem::kDqBuffers) & 1) ^ 1u);
    float4* out = reinterpret_cast<float4*>(sm.dq(buf) + w * kDqRegs * kWarpgroupThreads);
#pragma unroll
    for (int g = 0; g < kDqRegs / 4; ++g)
      out[g * kWarpgroupThreads + tid] = make_float4(dq[4 * g], dq[4 * g + 1], dq[4 * g + 2], dq[4 * g + 3]);
    fence_proxy_async();
    mbarrier_arrive(sm.dq_full(buf));
  }

  Tuning::mark(kStepsDone);
  // Every GEMM has read K and V: a persistent CTA's loader may bring the next tile's.
  if (ring.more) mbarrier_arrive(sm.kv_empty());
  // dK (times the scale) and dV, 2 elements a store, keys past the sequence not written.
  T* dk_out = static_cast<T*>(p.dk) + st.b * p.dk_sb + st.hk * p.dk_sh + seq.k_start * p.dk_sl;
  T* dv_out = static_cast<T*>(p.dv) + st.b * p.dv_sb + st.hk * p.dv_sh + seq.k_start * p.dv_sl;
  if constexpr (kStaged) {
    // The stages are free: every step's GEMMs of both consumers are done (named barrier 2) and
    // the loader has nothing more to bring (one tile a CTA: no persistent walk).
    static_assert(2 * Smem::kStages * Smem::kQBytes >= 2 * 2 * 64 * kD * 2,
                  "dK and dV of both in the stages");
    T* tile = reinterpret_cast<T*>(sm.q(0)) + w * 2 * 64 * kD;
    bwd_store_staged<kD, T>(dk, dv, tile, 5 + w, p.scale, dk_out, p.dk_sl, dv_out, p.dv_sl, k0 + 64 * w,
                            len_k);
  } else {
#pragma unroll
    for (int e = 0; e < kD / 2; e += 2) {
      const int key = k0 + 64 * w + acc_row(e, warp, lane), c = acc_col(e, lane);
      if (key < len_k) {
        *reinterpret_cast<uint32_t*>(dk_out + key * p.dk_sl + c) =
            cuda::pack2<T>(dk[e] * p.scale, dk[e + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_out + key * p.dv_sl + c) = cuda::pack2<T>(dv[e], dv[e + 1]);
      }
    }
  }
}

// A CTA's tile: its key block, sequence, mask band and steps, from its position in launch order
// (linear: batch, KV head, then key blocks in the order of bwd_order.h).
struct BwdTile {
  int n_block;
  BwdSteps st;
  BwdSeq seq;
  TileBand band;
};
template <class Smem, class Mask, bool kVarlen>
__device__ __forceinline__ BwdTile bwd_tile(const BwdParams& p, int64_t linear) {
  const cuda::KernelParams& f = p.f;
  const DqOrder order{Mask::kMasks && p.dq_order != nullptr};  // launch order (bwd_order.h)
  BwdTile t;
  t.n_block = order.key_block(static_cast<int>(linear % p.n_blocks), static_cast<int>(p.n_blocks));
  t.st.hk = (linear / p.n_blocks) % p.heads_kv;
  t.st.b = linear / p.n_blocks / p.heads_kv;
  t.st.group = f.group;
  t.seq = bwd_seq<kVarlen>(f, t.st.b);
  t.band = tile_band<Mask>(t.seq.len_q, t.seq.len_k, f.window_left, f.window_right);
  bwd_query_blocks(t.band, t.n_block, t.seq.len_q, Smem::kM, Smem::kN, &t.st.m_begin, &t.st.m_count);
  t.st.count = int64_t{t.st.m_count} * f.group;
  return t;
}

// Runs body(tile, ring) on the CTA's tiles: its own, or with kPersistent (gridDim.x CTAs, one an
// SM) every gridDim.x-th from blockIdx.x on, each role of the CTA walking them in the same order.
template <bool kPersistent, class Smem, class Mask, class Body>
__device__ __forceinline__ void bwd_each_tile(const BwdParams& p, const BwdTile& first, Body&& body) {
  if constexpr (!kPersistent) {
    body(first, BwdRing{});
  } else {
    const int64_t total = p.n_blocks * p.heads_kv * p.batch;
    BwdRing ring;
    BwdTile t = first;
    for (int64_t linear = blockIdx.x;; linear += gridDim.x) {
      ring.more = linear + gridDim.x < total;
      body(t, ring);
      if (!ring.more) break;
      ring.step0 += t.st.count;
      ++ring.tile;
      t = bwd_tile<Smem, Mask, false>(p, linear + gridDim.x);
    }
  }
}

// kVarlen: the batch's sequences differ (cu_seqlens, seqused: bwd_seq); CTAs past a sequence's
// keys end at once. kPersistent (a tuning variant, dense batches): one CTA an SM walks tiles
// (bwd_each_tile), the next tile's K and V loaded once the consumers are done with the last's
// (kv_empty), while they write its dK and dV; its Q / dO stages and dQ buffers carry on from the
// last's. Deterministic mode waits on other CTAs' tiles, so it is launched cooperatively
// (bwd_launch.cuh: every CTA resident).
template <int kD, class T, class Mask, bool kVarlen, bool kPersistent = false, class Tuning = BwdTuning>
__global__ void __launch_bounds__(3 * kWarpgroupThreads, 1)
    attention_bwd_sm90(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                       const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = BwdSmem<kD, Mask::kMasks>;
  static_assert(!kPersistent || !kVarlen, "persistent CTAs: dense batches");
  // setmaxnreg: the varlen loader's address math wants more than 24 registers (at D = 256 it
  // spilled 112-124 bytes there, 20-24 at 40); only D = 256's consumers can spare 8 (D = 128's
  // wgmmas are serialized at 232, D = 64's consumers spill).
  constexpr bool kWideLoader = kVarlen && kD == 256;
  constexpr int kProducerRegs = kWideLoader ? 40 : 24, kConsumerRegs = kWideLoader ? 232 : 240;
  extern __shared__ uint8_t smem_raw[];
  Tuning::mark(kEntered);
  const Smem sm{align_smem_1024(smem_raw)};
  int64_t linear = blockIdx.x;
  if constexpr (!Mask::kMasks && !kPersistent)
    if (p.dq_order != nullptr && p.det_group_log2 > 0)  // launch_bwd's 2-D grid (also when y is 1)
      linear = grouped_tile(blockIdx.x, blockIdx.y, p.n_blocks, p.det_group_log2);
  const BwdTile first = bwd_tile<Smem, Mask, kVarlen>(p, linear);
  if (first.n_block * Smem::kN >= first.seq.len_k) return;  // past this sequence's keys: nothing to write

  if (threadIdx.x == 0) {
    mbarrier_init(sm.kv_full(), 1);
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(sm.qdo_full(s), 1 + 32);  // the loader's lane 0 with its bytes, then its 32 lanes
      mbarrier_init(sm.qdo_empty(s), 2 * kWarpgroupThreads);
      mbarrier_init(sm.dq_full(s), 2 * kWarpgroupThreads);  // every consumer writes its half
      mbarrier_init(sm.dq_empty(s), 1);                     // the writer's bulk reduction has read it
      mbarrier_init(sm.qdo_landed(s), 1);
    }
    mbarrier_init(sm.kv_landed(), 1);
    if constexpr (kPersistent) mbarrier_init(sm.kv_empty(), 2 * kWarpgroupThreads);
    fence_barrier_init();
  }
  __syncthreads();
  const int wg = warpgroup_index();
  const auto each_tile = [&](auto&& body) { bwd_each_tile<kPersistent, Smem, Mask>(p, first, body); };
  if (wg == 2) {  // the producer: registers back, then its first warp loads and a lane of its second adds dQ
    warpgroup_reg_dealloc<kProducerRegs>();
    const int warp = static_cast<int>(threadIdx.x / 32) % 4, lane = static_cast<int>(threadIdx.x % 32);
    if (warp == 0) {
      each_tile([&](const BwdTile& t, const BwdRing& ring) {
        bwd_loader(sm, p, t.seq, t.st, t.n_block * Smem::kN, &tm_q, &tm_k, &tm_v, &tm_do, ring);
      });
      Tuning::mark(kLoadsIssued);
    } else if (warp == 1 && lane == 0) {
      const DqOrder order{Mask::kMasks && p.dq_order != nullptr};
      each_tile([&](const BwdTile& t, const BwdRing& ring) {
        // Deferred raises when the next key block in the order (n - 1) starts on an earlier
        // query block, so it reaches each block later than this one (bwd_order.h).
        int prev_begin = 0, prev_count = 0;
        if (t.n_block > 0)
          bwd_query_blocks(t.band, t.n_block - 1, t.seq.len_q, Smem::kM, Smem::kN, &prev_begin, &prev_count);
        bwd_dq_writer<Smem, Mask, kVarlen>(sm, p, t.seq, t.st, t.n_block,
                                           order.deferred(t.n_block, t.st.m_begin, prev_begin), ring);
      });
      Tuning::mark(kDqWritten);
    }
    return;
  }
  warpgroup_reg_alloc<kConsumerRegs>();
  each_tile([&](const BwdTile& t, const BwdRing& ring) {
    if constexpr (kD == 256)
      bwd_pair_consumer<Smem, T, Mask>(sm, p, t.seq, wg, t.n_block, t.st, ring);
    else
      bwd_consumer<Smem, T, Mask, Tuning, Tuning::kStageDkDv && !kPersistent>(sm, p, t.seq, wg, t.n_block,
                                                                              t.st, ring);
  });
  Tuning::mark(kDkDvStored);
#endif
}

}  // namespace tileattn::detail::sm90
