// mask.h: masking policies (NoMask, CausalMask, WindowMask): which keys a query row sees, and
// which key blocks of a query tile are fully visible, partly masked or skipped.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail {

TILEATTN_HD int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
TILEATTN_HD int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Every policy is also a band around the diagonal: row i sees key j (0 <= j < Lk) exactly when
// i + lo_diag <= j < i + hi_diag. Kernels use this form for per-element tests, where it needs
// one add per row instead of the clamps of lo()/hi(). kUnbounded marks a side without a limit.
inline constexpr int64_t kUnbounded = INT64_MAX / 4;
struct Band {
  int64_t lo_diag, hi_diag;
};

// Each policy gives, for query row i, the visible keys [lo(i), hi(i)) clamped to [0, Lk).
// lo and hi are non-decreasing in i, which is what the block helpers below rely on.
// All alignment is bottom-right: row i sits at key position i + (Lk - Lq). Mask::make builds a
// policy for one sequence's lengths (varlen batches: per sequence, on the device).
struct NoMask {
  int64_t seqlen_k;
  static constexpr bool kMasks = false;
  static TILEATTN_HD NoMask make(int64_t, int64_t len_k, int64_t, int64_t) { return NoMask{len_k}; }
  TILEATTN_HD int64_t lo(int64_t) const { return 0; }
  TILEATTN_HD int64_t hi(int64_t) const { return seqlen_k; }
  TILEATTN_HD Band band() const { return {-kUnbounded, kUnbounded}; }
};

struct CausalMask {
  int64_t seqlen_k, offset;  // offset = Lk - Lq
  static constexpr bool kMasks = true;
  static TILEATTN_HD CausalMask make(int64_t len_q, int64_t len_k, int64_t, int64_t) {
    return CausalMask{len_k, len_k - len_q};
  }
  TILEATTN_HD int64_t lo(int64_t) const { return 0; }
  TILEATTN_HD int64_t hi(int64_t i) const { return imax(0, imin(seqlen_k, i + offset + 1)); }
  TILEATTN_HD Band band() const { return {-kUnbounded, offset + 1}; }
};

struct WindowMask {
  int64_t seqlen_k, offset, left, right;  // left/right: -1 = unbounded
  static constexpr bool kMasks = true;
  static TILEATTN_HD WindowMask make(int64_t len_q, int64_t len_k, int64_t left, int64_t right) {
    return WindowMask{len_k, len_k - len_q, left, right};
  }
  TILEATTN_HD int64_t lo(int64_t i) const {
    return left < 0 ? 0 : imin(seqlen_k, imax(0, i + offset - left));
  }
  TILEATTN_HD int64_t hi(int64_t i) const {
    return right < 0 ? seqlen_k : imax(0, imin(seqlen_k, i + offset + right + 1));
  }
  TILEATTN_HD Band band() const {
    return {left < 0 ? -kUnbounded : offset - left, right < 0 ? kUnbounded : offset + right + 1};
  }
};

// A sequence's mask in the 32-bit form GPU kernels keep in registers: row i (0 <= i < len_q) sees
// keys [first(i), end(i)) of [0, len_k), from the policy's band clamped to [-len_q, len_k]
// (which keeps its meaning there and every sum inside int: lengths < 2^30). kMasks false
// (NoMask): only the ragged end of the keys limits a row. Agrees with the policies' lo/hi and
// block helpers (tests/mask_test.cc).
struct TileBand {
  int lo, hi, len_k;
  TILEATTN_HD int first(int i) const { return i + lo > 0 ? i + lo : 0; }
  TILEATTN_HD int end(int i) const { return i + hi < len_k ? i + hi : len_k; }
  // The key blocks of block_k the query rows [q0, q1) visit: [*n_begin, *n_end), none when equal.
  TILEATTN_HD void key_blocks(int q0, int q1, int block_k, int* n_begin, int* n_end) const {
    const int begin = first(q0), stop = end(q1 - 1);
    if (begin >= stop || begin >= len_k) {
      *n_begin = *n_end = 0;
      return;
    }
    *n_begin = begin / block_k;
    *n_end = (stop + block_k - 1) / block_k;
  }
  // The backward's inverse of key_blocks: the query rows [*q_begin, *q_end) of [0, len_q) that
  // may see a key of [k0, k1), 0 <= k0 < k1 <= len_k. Every row that does lies inside (rows that
  // see nothing at all may too): row i sees some key of the range iff i + hi > k0 and i + lo < k1.
  TILEATTN_HD void query_rows(int k0, int k1, int len_q, int* q_begin, int* q_end) const {
    const int b = k0 - hi + 1, e = k1 - lo;
    *q_begin = b > 0 ? b : 0;
    *q_end = e < len_q ? e : len_q;
  }
  // Whether keys [k0, k0 + block_k) need per-element masking for rows [q0, q1).
  TILEATTN_HD bool needs_mask(int q0, int q1, int k0, int block_k, bool masks) const {
    return k0 + block_k > len_k || (masks && !(k0 >= first(q1 - 1) && k0 + block_k <= end(q0)));
  }
};

template <class Mask>
TILEATTN_HD TileBand tile_band(int64_t len_q, int64_t len_k, int64_t left, int64_t right) {
  const Band band = Mask::make(len_q, len_k, left, right).band();
  const int64_t lo = imax(-len_q, imin(len_k, band.lo_diag)), hi = imax(-len_q, imin(len_k, band.hi_diag));
  return TileBand{static_cast<int>(lo), static_cast<int>(hi), static_cast<int>(len_k)};
}

// Keys [begin, end) that any row of the query tile [q0, q1) sees; begin >= end means none.
template <class Mask>
TILEATTN_HD void tile_key_range(const Mask& mask, int64_t q0, int64_t q1, int64_t* begin, int64_t* end) {
  *begin = mask.lo(q0);
  *end = mask.hi(q1 - 1);
}

// The rows of the query tile [q0, q0 + rows) that see key `key` are [*first, max(*first,
// *past)): rows before *first see only earlier keys (hi <= key), rows from *past on only later
// ones (lo > key). lo and hi are non-decreasing in the row, so for keys visited in increasing
// order both only move forward: start them at 0 and pass them back for the next key.
template <class Mask>
TILEATTN_HD void rows_seeing(const Mask& mask, int64_t q0, int64_t rows, int64_t key, int64_t* first,
                             int64_t* past) {
  while (*first < rows && mask.hi(q0 + *first) <= key) ++*first;
  while (*past < rows && mask.lo(q0 + *past) <= key) ++*past;
}

// True when every row of [q0, q1) sees every key of [k0, k1): the block needs no masking.
template <class Mask>
TILEATTN_HD bool block_fully_visible(const Mask& mask, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  if constexpr (!Mask::kMasks) {
    return true;
  } else {
    return k0 >= mask.lo(q1 - 1) && k1 <= mask.hi(q0);
  }
}

}  // namespace tileattn::detail

namespace tileattn::detail {

// Trip counts for kernels that walk keys in fixed blocks of block_k aligned to multiples of
// block_k: the query tile [q0, q1) visits key blocks [*n_begin, *n_end) (none when equal).
template <class Mask>
TILEATTN_HD void key_block_range(const Mask& mask, int64_t q0, int64_t q1, int64_t block_k, int64_t* n_begin,
                                 int64_t* n_end) {
  int64_t begin, end;
  tile_key_range(mask, q0, q1, &begin, &end);
  if (begin >= end) {
    *n_begin = *n_end = 0;
    return;
  }
  *n_begin = begin / block_k;
  *n_end = (end + block_k - 1) / block_k;
}

// Whether key block [k0, k0 + block_k) needs per-element masking for the query tile [q0, q1):
// some of its keys are hidden from some row, or it runs past seqlen_k (a ragged last block,
// which NoMask has too). Blocks for which this is false are computed without any masking.
template <class Mask>
TILEATTN_HD bool block_needs_mask(const Mask& mask, int64_t q0, int64_t q1, int64_t k0, int64_t block_k) {
  return k0 + block_k > mask.seqlen_k || !block_fully_visible(mask, q0, q1, k0, k0 + block_k);
}

}  // namespace tileattn::detail
