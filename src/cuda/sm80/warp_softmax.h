// warp_softmax.h: the online softmax of one warp's rows over S fragments, built on SoftmaxRow.
//
// A lane holds rows g and g + 8 of each m-tile; the 4 lanes of a quad (same g) share a row and
// each sees a quarter of its keys. m (the base) is made identical across the quad with two
// shuffles per block; l stays a per-lane partial sum until finish() adds the quad together.
// Scaling l by alpha commutes with that sum, so SoftmaxRow's semantics hold unchanged.
#pragma once

#include "common/online_softmax.h"
#include "cuda/sm80/ptx.h"

namespace tileattn::detail::sm80 {

template <int kM, int kN>
struct WarpSoftmax {
  SoftmaxRow row[kM][2];

  // A new block of logits t arrives (weights exp2(t * post - m), post > 0). Moves each row's
  // base as SoftmaxRow::advance decides and returns in alpha the factor its O row must be scaled
  // by. Returns whether any row of the warp needs scaling (a warp-uniform answer, so the caller's
  // branch does not diverge; rows that keep their base have alpha = 1).
  __device__ __forceinline__ bool advance(const float (&s)[kM][kN][4], float post, bool conditional,
                                          float (&alpha)[kM][2]) {
    bool rescale = false;
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kN; ++j) mx = fmaxf(mx, fmaxf(s[i][j][2 * h], s[i][j][2 * h + 1]));
        mx = quad_max(mx);
        // A fully masked row of the block has mx = -inf, and -inf * post stays -inf.
        alpha[i][h] = row[i][h].advance(mx * post, conditional);
        rescale |= alpha[i][h] != 1.0f;
      }
    return __any_sync(0xffffffffu, rescale);
  }

  // t -> exp2(t * post - base) in place (one FFMA and one ex2 per element), l += the row sums.
  // base() is 0 for a row that has seen no key yet, so masked -inf entries give 0, never NaN.
  __device__ __forceinline__ void exponentiate(float (&s)[kM][kN][4], float post) {
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float neg_base = -row[i][h].base();
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kN; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = ex2(fmaf(s[i][j][2 * h + e], post, neg_base));
            s[i][j][2 * h + e] = p;
            sum += p;
          }
        row[i][h].add(sum);
      }
  }

  // After the last block: l becomes the whole row's sum in every lane of the quad.
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row[i][h].l = quad_sum(row[i][h].l);
      }
  }
};

}  // namespace tileattn::detail::sm80
