// softmax.cuh: the online softmax of one consumer thread's two rows over a key block's scores
// in the wgmma accumulator layout: score transform, mask, the running max and sum.
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "cuda/common/kernel_params.h"
#include "cuda/common/math.cuh"

namespace tileattn::detail::sm90 {

// Thread (warp, g = lane / 4, q = lane % 4) of a consumer holds rows 16 warp + g (half 0) and
// + 8 (half 1) of its 64; accumulator i of S is in half (i >> 1) & 1 and column 8 (i >> 2) + 2 q
// + (i & 1) (HOPPER_FACTS B3). pos: the positions of the two rows (the mask's row index),
// pos_first / pos_last those of the consumer's first and last rows. kMasks: the mask policy
// hides keys (else only the keys' ragged end is masked). kChains > 1 (TileConfig::
// softmax_chains, a tuning variant): each row's max and sum as kChains interleaved chains
// combined at the end, both rows reduced over the quad together, and the base moved without a
// branch (the default's chains are kN / 4 dependent FMNMX and FADD a row, ~4 cycles each, the
// second row's max after the first row's branchy advance: ~500 cycles before the first exp2
// at kN = 128, in the SASS of nvcc 13.0).
template <int kN, bool kMasks, int kChains = 1>
struct BlockSoftmax {
  const cuda::KernelParams& p;
  TileBand band;  // the sequence's mask, 32-bit (common/mask.h)
  int pos_first, pos_last, pos[2];
  int q;
  SoftmaxRow state[2];
  float alpha[2];  // what O must be scaled by after the last block (1 = untouched)

  // Scores of the block starting at key k0 (in s, fp32) to weights in place.
  __device__ __forceinline__ void operator()(float* s, int k0) {
    if (p.transform == cuda::ScoreTransform::kSoftcap) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) s[i] = cuda::tanh_via_ex2(s[i] * p.pre);
    } else if (p.transform == cuda::ScoreTransform::kNegate) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) s[i] = -s[i];
    }
    if (band.needs_mask(pos_first, pos_last + 1, k0, kN, kMasks)) {
      // Each of the thread's two rows sees columns [lo, hi) of this block (end() stops at len_k).
      int lo[2], hi[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        lo[half] = band.first(pos[half]) - k0;
        hi[half] = band.end(pos[half]) - k0;
      }
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        const int col = 8 * (i >> 2) + 2 * q + (i & 1), half = (i >> 1) & 1;
        if (col < lo[half] || col >= hi[half]) s[i] = -INFINITY;
      }
    }
    float base[2], chain_max[2][kChains];
#pragma unroll
    for (int c = 0; c < 2 * kChains; ++c) chain_max[c / kChains][c % kChains] = -INFINITY;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      float& m = chain_max[(i >> 1) & 1][(i >> 2) % kChains];
      m = fmaxf(m, s[i]);
    }
    if constexpr (kChains == 1) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // post > 0, so the max of t times post is the max of the logits (log2 units).
        alpha[half] = state[half].advance(cuda::quad_max(chain_max[half][0]) * p.post, p.conditional);
        base[half] = state[half].base();
      }
    } else {
      float block_max[2];  // both rows over the quad before either advance (no branch between)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        block_max[half] = cuda::quad_max(combine<kChains>(chain_max[half], fmaxf_op));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        alpha[half] = advance_branch_free(state[half], block_max[half] * p.post);
        base[half] = state[half].base();
      }
    }
    float sum[2][kChains] = {};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const float t = fmaf(s[i], p.post, -base[(i >> 1) & 1]);  // one FFMA, then the exp unit
      s[i] = cuda::ex2(t);
      sum[(i >> 1) & 1][(i >> 2) % kChains] += s[i];
    }
    // This thread's columns only; the quad's sum is taken at the end.
    state[0].add(combine<kChains>(sum[0], add_op));
    state[1].add(combine<kChains>(sum[1], add_op));
  }

  static __device__ __forceinline__ float fmaxf_op(float a, float b) { return fmaxf(a, b); }
  static __device__ __forceinline__ float add_op(float a, float b) { return a + b; }
  // x[0] op x[1] op ... as a tree (x[0] itself for one chain).
  template <int kCount, class Op>
  static __device__ __forceinline__ float combine(const float (&x)[kCount], Op op) {
    if constexpr (kCount == 1) {
      return x[0];
    } else {
      float y[kCount / 2];
#pragma unroll
      for (int c = 0; c < kCount / 2; ++c) y[c] = op(x[2 * c], x[2 * c + 1]);
      return combine<kCount / 2>(y, op);
    }
  }
  // SoftmaxRow::advance with selects instead of its early return, and alpha from the exp unit.
  __device__ __forceinline__ float advance_branch_free(SoftmaxRow& row, float block_max) const {
    const float m_new = fmaxf(row.m, block_max);
    const bool keep = m_new == row.m || (p.conditional && m_new - row.m <= kRescaleThreshold);
    const float moved = row.m == -INFINITY ? 0.0f : cuda::ex2(row.m - m_new);
    const float a = keep ? 1.0f : moved;
    row.m = keep ? row.m : m_new;
    row.l *= a;
    return a;
  }

  // The rows' final state: l summed over the quad.
  __device__ __forceinline__ SoftmaxRow total(int half) const {
    SoftmaxRow t = state[half];
    t.l = cuda::quad_sum(state[half].l);
    return t;
  }
};

}  // namespace tileattn::detail::sm90
