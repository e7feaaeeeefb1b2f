// bwd_layout.h: where the sm90 backward keeps a thread's accumulator elements and dS in shared
// memory, shared by the kernel (bwd_kernel.cuh) and the CPU test that replays the dS store
// (tests/sm90_ds_layout_test.cc).
#pragma once

#include "common/host_device.h"

namespace tileattn::detail::sm90 {

// Accumulator element i of a thread in an m64nN wgmma tile: its row and column (wgmma_ops.cuh).
TILEATTN_HD int acc_row(int i, int warp, int lane) { return 16 * warp + lane / 4 + 8 * ((i >> 1) & 1); }
TILEATTN_HD int acc_col(int i, int lane) { return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1); }

// dS [64 queries][64 keys] of one consumer's key chunk, in the 128-byte swizzle of a K-major
// wgmma A operand: the byte offset of element (query c, key r).
TILEATTN_HD int ds_offset(int c, int r) { return c * 128 + (((r >> 3) ^ (c & 7)) << 4) + (r & 7) * 2; }

// The row address lane `lane` of warp `warp` gives stmatrix .x4 .trans for the thread's
// fragment registers fs[m][0..3]: register q holds the 8 x 8 block of keys 16 warp + 8 (q % 2)
// on and queries 8 (2 m + q / 2) on, and lane 8 q + i addresses the block's query row i.
TILEATTN_HD int ds_stmatrix_offset(int m, int warp, int lane) {
  const int q = lane / 8, key = 16 * warp + 8 * (q % 2), c = 8 * (2 * m + q / 2) + lane % 8;
  return ds_offset(c, key);
}

}  // namespace tileattn::detail::sm90
