// online_softmax.h: the per-row online-softmax state (m, l) shared in meaning by every kernel.
//
// Logits are kept in log2 units (the scale carries log2(e)), so weights are exp2(s - m).
// The accumulator O lives with the caller; advance() returns the factor O must be scaled by.
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace tileattn::detail {

// FA4's conditional rescaling: while a row's max grows by at most this much (log2 units) the old
// base is kept, so weights stay <= 2^8 and neither l nor O is touched. Exact: l and O share it.
inline constexpr float kRescaleThreshold = 8.0f;
inline constexpr float kLn2 = 0.69314718055994530942f;
inline constexpr float kLog2e = 1.44269504088896340736f;

struct SoftmaxRow {
  float m = -INFINITY;  // the base: this row's weights so far are exp2(s - m)
  float l = 0.0f;       // sum of those weights

  // A new block whose largest logit is block_max arrives. Moves the base if needed and returns
  // alpha: l has been scaled by it, and the caller must scale its O row by it (1 = untouched).
  // block_max = -inf (a fully masked row of the block) leaves everything as it is.
  TILEATTN_HD float advance(float block_max, bool conditional) {
    const float m_new = fmaxf(m, block_max);
    // m = -inf makes the difference inf or NaN, so the first real block always sets the base.
    if (m_new == m || (conditional && m_new - m <= kRescaleThreshold)) return 1.0f;
    const float alpha = (m == -INFINITY) ? 0.0f : exp2f(m - m_new);
    m = m_new;
    l *= alpha;
    return alpha;
  }

  // Subtract this from a logit before exp2. While no key has been seen it is 0, not -inf, so
  // masked logits (-inf) give weight 0 instead of exp2(-inf - -inf) = NaN.
  TILEATTN_HD float base() const { return m == -INFINITY ? 0.0f : m; }

  TILEATTN_HD void add(float block_sum) { l += block_sum; }

  // Final O = O_acc * inv_l(). A row that saw no key has l = 0 and gets O = 0; NaN propagates.
  TILEATTN_HD float inv_l() const { return l == 0.0f ? 0.0f : 1.0f / l; }

  // Natural-log LSE: -inf for a row that saw no key; NaN propagates.
  TILEATTN_HD float lse() const { return l == 0.0f ? -INFINITY : (m + log2f(l)) * kLn2; }

  // Merges another partial state over a disjoint key set into this one. Returns the factors
  // (this_alpha, other_alpha) the two O rows must be scaled by before they are added.
  // Two empty states stay empty (factors 0), which avoids exp2(-inf - -inf) = NaN.
  TILEATTN_HD void merge(const SoftmaxRow& other, float* this_alpha, float* other_alpha) {
    const float m_new = fmaxf(m, other.m);
    *this_alpha = (m == -INFINITY) ? 0.0f : exp2f(m - m_new);
    *other_alpha = (other.m == -INFINITY) ? 0.0f : exp2f(other.m - m_new);
    l = l * *this_alpha + other.l * *other_alpha;
    m = m_new;
  }
};

}  // namespace tileattn::detail
