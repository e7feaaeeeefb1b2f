// scores.h: what turns a raw S = Q K^T fragment into logits t with weight exp2(t * post - m):
// the score transform (softcap, a negative scale) and the mask.
#pragma once

#include <cstdint>

#include "cuda/sm80/ptx.h"

namespace tileattn::detail::sm80 {

// The weight of a raw score s is exp2(t * post - m) with t one of these, so that the row max can
// be taken over t: post must be > 0 for max(t) * post to be the max of the logits.
enum class ScoreTransform : int {
  kNone,     // t = s,                     post = scale * log2(e)   (scale > 0)
  kNegate,   // t = -s,                    post = -scale * log2(e)  (scale < 0)
  kSoftcap,  // t = tanh(s * scale / cap), post = cap * log2(e)
};

// tanh(x) = 1 - 2 / (e^(2x) + 1), with two_x_log2e = 2 x log2(e): two special-function ops and an
// absolute error of a few fp32 ulps of 1 (tanh.approx would be ~2^-11 relative, too coarse once
// multiplied by a softcap of 30 or 50). Saturates to +-1 and keeps NaN.
__device__ __forceinline__ float tanh_via_ex2(float two_x_log2e) {
  return fmaf(-2.0f, rcp(ex2(two_x_log2e) + 1.0f), 1.0f);
}

// pre is the multiplier that turns s into the exponent of tanh_via_ex2: 2 log2(e) scale / cap.
template <int kM, int kN>
__device__ __forceinline__ void transform_scores(float (&s)[kM][kN][4], ScoreTransform transform, float pre) {
  if (transform == ScoreTransform::kSoftcap) {
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][j][e] = tanh_via_ex2(s[i][j][e] * pre);
  } else if (transform == ScoreTransform::kNegate) {
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][j][e] = -s[i][j][e];
  }
}

// Sets the entries of a key block outside the mask's band (mask.h: Band) to -inf, in 32-bit
// arithmetic. For this lane's row g of m-tile 0 the visible columns of the block are
// [lo0, min(hi0, k_limit)); each further row of the lane shifts both band edges by its offset.
// k_limit = keys left before seqlen_k (the ragged last block). t = lane % 4, the column pair.
template <int kM, int kN>
__device__ __forceinline__ void apply_band(float (&s)[kM][kN][4], int lo0, int hi0, int k_limit, int t) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lo = lo0 + 16 * i + 8 * h;
      const int hi = min(hi0 + 16 * i + 8 * h, k_limit);
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t + e;
          if (col < lo || col >= hi) s[i][j][2 * h + e] = -INFINITY;
        }
    }
}

}  // namespace tileattn::detail::sm80
