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
// hides keys (else only the keys' ragged end is masked).
template <int kN, bool kMasks>
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
    float base[2], block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) block_max[(i >> 1) & 1] = fmaxf(block_max[(i >> 1) & 1], s[i]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // post > 0, so the max of t times post is the max of the logits (log2 units).
      alpha[half] = state[half].advance(cuda::quad_max(block_max[half]) * p.post, p.conditional);
      base[half] = state[half].base();
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const float t = fmaf(s[i], p.post, -base[(i >> 1) & 1]);  // one FFMA, then the exp unit
      s[i] = cuda::ex2(t);
      sum[(i >> 1) & 1] += s[i];
    }
    state[0].add(sum[0]);  // this thread's columns only; the quad's sum is taken at the end
    state[1].add(sum[1]);
  }

  // The rows' final state: l summed over the quad.
  __device__ __forceinline__ SoftmaxRow total(int half) const {
    SoftmaxRow t = state[half];
    t.l = cuda::quad_sum(state[half].l);
    return t;
  }
};

}  // namespace tileattn::detail::sm90
