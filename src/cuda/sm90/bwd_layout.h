// bwd_layout.h: where the sm90 backward keeps a thread's accumulator elements and dS in shared
// memory, and the order of dQ's fp32 sums, shared by the kernel (bwd_kernel.cuh, bwd.cu) and the
// CPU tests that replay the dS store and the dQ staging (tests/sm90_ds_layout_test.cc).
#pragma once

#include "common/host_device.h"

namespace tileattn::detail::sm90 {

// Accumulator element i of a thread in an m64nN wgmma tile: its row and column (wgmma_ops.cuh).
TILEATTN_HD int acc_row(int i, int warp, int lane) { return 16 * warp + lane / 4 + 8 * ((i >> 1) & 1); }
TILEATTN_HD int acc_col(int i, int lane) { return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1); }

// dS [block_m queries][64 keys] of one consumer's key chunk, in the 128-byte swizzle of a
// K-major wgmma A operand: the byte offset of element (query c, key r).
TILEATTN_HD int ds_offset(int c, int r) { return c * 128 + (((r >> 3) ^ (c & 7)) << 4) + (r & 7) * 2; }

// The row address lane `lane` of warp `warp` gives stmatrix .x4 .trans for the thread's
// fragment registers fs[m][0..3] (m < block_m / 16): register q holds the 8 x 8 block of keys
// 16 warp + 8 (q % 2) on and queries 8 (2 m + q / 2) on, and lane 8 q + i addresses the block's
// query row i.
TILEATTN_HD int ds_stmatrix_offset(int m, int warp, int lane) {
  const int q = lane / 8, key = 16 * warp + 8 * (q % 2), c = 8 * (2 * m + q / 2) + lane % 8;
  return ds_offset(c, key);
}

// Consumer w's part of a step's dQ tile (block_m x head_dim, two 64 x 64 parts): at D = 128 the
// column half w over all 64 rows, at D = 64 (block_m 128) the row half w over all 64 columns.
TILEATTN_HD int dq_part_row(int w, int head_dim) { return head_dim == 64 ? 64 * w : 0; }
TILEATTN_HD int dq_part_col(int w, int head_dim) { return head_dim == 64 ? 0 : 64 * w; }

// Float4 `idx` of a dQ tile in dq_accum (bwd.h): part idx / 1024, whose thread t = idx % 128
// stored its accumulators 4 g .. 4 g + 3 there (g = idx % 1024 / 128). It holds columns *col
// and *col + 1 of rows *row and *row + 8 (acc_row, acc_col).
TILEATTN_HD void dq_accum_pos(int idx, int head_dim, int* row, int* col) {
  const int part = idx / 1024, g = idx % 1024 / 128, t = idx % 128;
  *row = dq_part_row(part, head_dim) + acc_row(4 * g, t / 32, t % 32);
  *col = dq_part_col(part, head_dim) + acc_col(4 * g, t % 32);
}

}  // namespace tileattn::detail::sm90
