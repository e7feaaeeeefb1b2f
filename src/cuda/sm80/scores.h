// scores.h: the score transform (softcap, a negative scale; cuda/common/kernel_params.h) and the
// mask's band applied to mma.sync S fragments.
#pragma once

#include <cstdint>

#include "cuda/common/kernel_params.h"
#include "cuda/sm80/ptx.h"

namespace tileattn::detail::sm80 {

using cuda::ScoreTransform;
using cuda::tanh_via_ex2;

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
