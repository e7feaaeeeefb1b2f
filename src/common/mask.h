// mask.h: masking policies (NoMask, CausalMask, WindowMask): which keys a query row sees, and
// which key blocks of a query tile are fully visible, partly masked or skipped.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail {

TILEATTN_HD int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
TILEATTN_HD int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Each policy gives, for query row i, the visible keys [lo(i), hi(i)) clamped to [0, Lk).
// lo and hi are non-decreasing in i, which is what the block helpers below rely on.
// All alignment is bottom-right: row i sits at key position i + (Lk - Lq).
struct NoMask {
  int64_t seqlen_k;
  static constexpr bool kMasks = false;
  TILEATTN_HD int64_t lo(int64_t) const { return 0; }
  TILEATTN_HD int64_t hi(int64_t) const { return seqlen_k; }
};

struct CausalMask {
  int64_t seqlen_k, offset;  // offset = Lk - Lq
  static constexpr bool kMasks = true;
  TILEATTN_HD int64_t lo(int64_t) const { return 0; }
  TILEATTN_HD int64_t hi(int64_t i) const { return imax(0, imin(seqlen_k, i + offset + 1)); }
};

struct WindowMask {
  int64_t seqlen_k, offset, left, right;  // left/right: -1 = unbounded
  static constexpr bool kMasks = true;
  TILEATTN_HD int64_t lo(int64_t i) const {
    return left < 0 ? 0 : imin(seqlen_k, imax(0, i + offset - left));
  }
  TILEATTN_HD int64_t hi(int64_t i) const {
    return right < 0 ? seqlen_k : imax(0, imin(seqlen_k, i + offset + right + 1));
  }
};

// Keys [begin, end) that any row of the query tile [q0, q1) sees; begin >= end means none.
template <class Mask>
TILEATTN_HD void tile_key_range(const Mask& mask, int64_t q0, int64_t q1, int64_t* begin,
                                int64_t* end) {
  *begin = mask.lo(q0);
  *end = mask.hi(q1 - 1);
}

// True when every row of [q0, q1) sees every key of [k0, k1): the block needs no masking.
template <class Mask>
TILEATTN_HD bool block_fully_visible(const Mask& mask, int64_t q0, int64_t q1, int64_t k0,
                                     int64_t k1) {
  if constexpr (!Mask::kMasks) {
    return true;
  } else {
    return k0 >= mask.lo(q1 - 1) && k1 <= mask.hi(q0);
  }
}

}  // namespace tileattn::detail
