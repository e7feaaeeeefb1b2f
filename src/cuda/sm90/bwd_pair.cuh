// bwd_pair.cuh: the sm90 backward's consumers at D = 256 (bwd_kernel.cuh). A consumer's dK and dV
// for 64 keys would be 256 registers there, so both warpgroups work on the CTA's 64 keys and
// split the step's work by gradient instead of by keys:
//   warpgroup 0: S^T = K Q^T, P^T, and dV += P^T dO (its 128 accumulators);
//   warpgroup 1: dP^T = V dO^T, dS^T = P^T (dP^T - dsum) from the P^T warpgroup 0 hands over
//   in shared memory (fp32, each thread's elements where the same thread of warpgroup 1 reads
//   them), dS stored for dQ, and dK += dS^T Q;
//   both: a 128-column half of dQ = dS K each, staged in fp32 for the dQ writer.
// Five GEMMs of 64 x 64 x 256 a step, none recomputed, 2.5 a warpgroup; dQ in two 64-column
// passes so that dV or dK (128 registers) and dQ fit beside each other. Named barriers: 3 hands
// P^T over (warpgroup 0 arrives, 1 waits), 1 says dS is written (1 arrives, 0 waits), 2 says the
// last step's dQ GEMMs of warpgroup 0 have read dS (0 arrives, 1 waits before it writes dS
// again), and 4 (warpgroup 1 alone) that all its warps' rows of dS are written before its own
// dQ GEMMs read them.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "common/mask.h"
#include "cuda/common/math.cuh"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/bwd_ops.cuh"
#include "cuda/sm90/bwd_smem.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::detail::sm90 {

template <class Smem, class T, class Mask>
__device__ __forceinline__ void bwd_pair_consumer(const Smem& sm, const BwdParams& p, const BwdSeq& seq,
                                                  int w, int n_block, const BwdSteps& st,
                                                  const BwdRing& ring) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kD = Smem::kDim, kM = Smem::kM, kN = Smem::kN, kE = kM / 2;
  static_assert(kD == 256 && kN == 64 && kM == 64 && Smem::kStages == 1 && Smem::kDqBuffers == 1,
                "one block of 64 keys, 64 query rows a step, one stage (bwd_smem.cuh)");
  constexpr uint32_t kBoth = 2 * kWarpgroupThreads;
  const cuda::KernelParams& f = p.f;
  const int tid = threadIdx.x % kWarpgroupThreads, warp = tid / 32, lane = tid % 32;
  const int len_q = seq.len_q, len_k = seq.len_k, k0 = n_block * kN;
  const TileBand band = tile_band<Mask>(len_q, len_k, f.window_left, f.window_right);
  const bool softcap = f.transform == cuda::ScoreTransform::kSoftcap;
  const bool negate = f.transform == cuda::ScoreTransform::kNegate;
  float4* const handoff = reinterpret_cast<float4*>(sm.xch());  // [kE / 4][128 threads] float4

  float acc[kD / 2];  // dV (warpgroup 0) or dK (warpgroup 1): 64 keys x 256
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc[i] = 0.0f;
  mbarrier_wait<false>(sm.kv_full(), ring.tile & 1);

  for (int64_t i = 0; i < st.count; ++i) {
    const int64_t step = ring.step0 + i;  // the CTA's step (persistent CTAs: bwd_kernel.cuh)
    const uint32_t phase = static_cast<uint32_t>(step & 1);
    const int q0 = st.block(i) * kM;
    mbarrier_wait<false>(sm.qdo_full(0), phase);
    const float* lse2 = sm.rows(0);
    const float* dsum = lse2 + kM;
    // Element e of a thread: key k0 + acc_row(e), query q0 + acc_col(e); bit e of `seen` whether
    // the query sees the key (set before the loads, which then run unconditionally: bwd_kernel.cuh).
    const bool masked =
        q0 + kM > len_q || k0 + kN > len_k || band.needs_mask(q0, min(q0 + kM, len_q), k0, kN, Mask::kMasks);
    uint32_t seen = ~0u;
    if (masked) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int key = k0 + acc_row(e, warp, lane), c = acc_col(e, lane);
        if (!(key < len_k && c < len_q - q0 && c >= key - band.hi + 1 - q0 && c < key - band.lo + 1 - q0))
          seen &= ~(1u << e);
      }
    }
    float x[kE];
    if (w == 0) {
      gemm_rows<kD, kM, kBf16>(x, sm.k(), kN, sm.q(0));  // S^T = K Q^T
      wgmma_wait<0>();
      fence_operands<kE>(x);
      // P^T, and what dS^T needs of it (P^T, times 1 - t^2 under softcap) handed over.
#pragma unroll
      for (int g = 0; g < kE / 4; ++g) {
        float hand[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = 4 * g + j;
          const float t = softcap ? cuda::tanh_via_ex2(x[e] * f.pre) : negate ? -x[e] : x[e];
          const float prob = cuda::ex2(fmaf(t, f.post, -lse2[acc_col(e, lane)]));
          x[e] = (seen >> e) & 1 ? prob : 0.0f;
          hand[j] = softcap ? x[e] * (1.0f - t * t) : x[e];
        }
        handoff[g * kWarpgroupThreads + tid] = make_float4(hand[0], hand[1], hand[2], hand[3]);
      }
      named_arrive(3, kBoth);  // P^T handed over
      uint32_t fp[kM / 16][4];
      pack_frag<T>(fp, x);
      wgmma_fence();
      gemm_frag<kD, kM, kBf16>(acc, fp, sm.dout(0));  // dV += P^T dO
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands<kD / 2>(acc);
      named_sync(1, kBoth);  // dS written by warpgroup 1
    } else {
      gemm_rows<kD, kM, kBf16>(x, sm.v(), kN, sm.dout(0));  // dP^T = V dO^T
      wgmma_wait<0>();
      fence_operands<kE>(x);
      named_sync(3, kBoth);  // P^T handed over
#pragma unroll
      for (int g = 0; g < kE / 4; ++g) {
        const float4 h = handoff[g * kWarpgroupThreads + tid];
        const float hs[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = 4 * g + j;
          x[e] = (seen >> e) & 1 ? hs[j] * (x[e] - dsum[acc_col(e, lane)]) : 0.0f;
        }
      }
      uint32_t fs[kM / 16][4];
      pack_frag<T>(fs, x);
      if (step > 0) named_sync(2, kBoth);  // warpgroup 0's last dQ GEMMs have read dS
      const uint32_t ds_base = smem_addr(sm.ds());
#pragma unroll
      for (int m = 0; m < kM / 16; ++m)
        stmatrix_x4_trans(ds_base + ds_stmatrix_offset(m, warp, lane), fs[m][0], fs[m][1], fs[m][2],
                          fs[m][3]);
      fence_proxy_async();
      named_arrive(1, kBoth);  // dS written
      named_sync(4,
                 kWarpgroupThreads);  // every warp's rows of it, before this warpgroup's dQ GEMMs read them
      wgmma_fence();
      gemm_frag<kD, kM, kBf16>(acc, fs, sm.q(0));  // dK += dS^T Q
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands<kD / 2>(acc);
    }
    // Every GEMM of this warpgroup but dQ's has read Q and dO, every thread its rows: the
    // stage's release counts all 256 consumer threads.
    mbarrier_arrive(sm.qdo_empty(0));
    // dQ's columns 128 w on = dS K over the 64 keys, as two 64 x 64 parts (2w + h, bwd_layout.h),
    // each staged in the accumulators' order: A is dS [query][key], B K's chunk 2w + h.
    mbarrier_wait<false>(sm.dq_empty(0), phase ^ 1u);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float dq[32];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        const uint64_t da = make_smem_desc(sm.ds() + 32 * kk, 16, 1024);
        const uint64_t db = make_smem_desc(sm.k() + (2 * w + h) * kN * 128 + 2048 * kk, kN * 128, 1024);
        WgmmaOp<64, kBf16>::template ss<1>(dq, da, db, kk > 0 ? 1u : 0u);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands<32>(dq);
      float4* out = reinterpret_cast<float4*>(sm.dq(0) + (2 * w + h) * 64 * 64);
#pragma unroll
      for (int g = 0; g < 8; ++g)
        out[g * kWarpgroupThreads + tid] =
            make_float4(dq[4 * g], dq[4 * g + 1], dq[4 * g + 2], dq[4 * g + 3]);
    }
    if (w == 0 && (i + 1 < st.count || ring.more))
      named_arrive(2, kBoth);  // this step's dQ GEMMs have read dS
    fence_proxy_async();
    mbarrier_arrive(sm.dq_full(0));
  }

  // Persistent CTAs: K and V read by every GEMM, so the next tile's may load; and barrier 2
  // completes as often as it is waited on (warpgroup 0 arrived after the last step because a
  // tile followed, and none of those had steps).
  if (ring.more) mbarrier_arrive(sm.kv_empty());
  if (w == 1 && !ring.more && st.count == 0 && ring.step0 > 0) named_sync(2, kBoth);
  // dV (warpgroup 0) or dK times the scale (warpgroup 1), 2 elements a store, keys past the
  // sequence not written.
  T* const out = w == 0 ? static_cast<T*>(p.dv) + st.b * p.dv_sb + st.hk * p.dv_sh + seq.k_start * p.dv_sl
                        : static_cast<T*>(p.dk) + st.b * p.dk_sb + st.hk * p.dk_sh + seq.k_start * p.dk_sl;
  const int64_t sl = w == 0 ? p.dv_sl : p.dk_sl;
  const float scale = w == 0 ? 1.0f : p.scale;
#pragma unroll
  for (int e = 0; e < kD / 2; e += 2) {
    const int key = k0 + acc_row(e, warp, lane), c = acc_col(e, lane);
    if (key < len_k)
      *reinterpret_cast<uint32_t*>(out + key * sl + c) = cuda::pack2<T>(acc[e] * scale, acc[e + 1] * scale);
  }
}

}  // namespace tileattn::detail::sm90
