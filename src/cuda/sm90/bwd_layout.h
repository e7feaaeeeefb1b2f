// bwd_layout.h: where the sm90 backward keeps a thread's accumulator elements and dS in shared
// memory, and the order of dQ's fp32 sums, shared by the kernel (bwd_kernel.cuh, bwd.cu) and the
// CPU tests that replay the dS store and the dQ staging (tests/sm90_ds_layout_test.cc).
#pragma once

#include <cstdint>

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

// dK or dV of a consumer's 64 keys staged in shared memory (BwdTuning::kStageDkDv): the element
// offset of (key r, column c) in rows of head_dim elements, 16-byte chunk c / 8 of row r at
// chunk (c / 8) ^ (r % 8), so a warp's accumulator pairs (8 rows, 4 lanes a row) and 8 threads'
// 16-byte reads of one row each fall in distinct banks.
TILEATTN_HD int dkdv_stage_offset(int r, int c, int head_dim) {
  return r * head_dim + (((c / 8) ^ (r % 8)) * 8) + c % 8;
}

// Part w of a step's dQ tile (block_m x head_dim in 64 x 64 parts): at D = 128 and 256 the
// columns 64 w on over all 64 rows (consumer w computes part w at D = 128, parts 2w and 2w + 1 at
// D = 256), at D = 64 (block_m 128) the row half w over all 64 columns.
TILEATTN_HD int dq_part_row(int w, int head_dim) { return head_dim == 64 ? 64 * w : 0; }
TILEATTN_HD int dq_part_col(int w, int head_dim) { return head_dim == 64 ? 0 : 64 * w; }

// dQ's tile computed transposed (dQ^T = K^T dS^T: no wgmma has M = 80), in parts of 64 columns
// of D by the block_m rows.
TILEATTN_HD constexpr bool bwd_dq_transposed(int block_m) { return block_m == 80; }
// Float4 `idx` of a dQ tile in dq_accum (bwd.h): part idx / P (P = 1024 float4s of a 64 x 64
// part, 1280 at block_m 80), whose thread t = idx % 128 stored its accumulators 4 g .. 4 g + 3
// there (g = idx % P / 128). It holds
// columns *col and *col + 1 of rows *row and *row + 8 (acc_row, acc_col): x, y, z, w are (row,
// col), (row, col + 1), (row + 8, col), (row + 8, col + 1). At block_m 80 the parts are dQ^T's
// (64 columns of D by the 80 rows), so x, y, z, w are (row, col), (row + 1, col), (row, col + 8),
// (row + 1, col + 8).
TILEATTN_HD void dq_accum_pos(int idx, int head_dim, int block_m, int* row, int* col) {
  const bool transposed = bwd_dq_transposed(block_m);
  const int per = transposed ? 16 * block_m : 1024, part = idx / per, g = idx % per / 128, t = idx % 128;
  if (transposed) {
    *row = acc_col(4 * g, t % 32);
    *col = 64 * part + acc_row(4 * g, t / 32, t % 32);
    return;
  }
  *row = dq_part_row(part, head_dim) + acc_row(4 * g, t / 32, t % 32);
  *col = dq_part_col(part, head_dim) + acc_col(4 * g, t % 32);
}
// dq_accum's tiles of block_m x head_dim fp32 (bwd.h): head-major, and within a head the
// batch's sequences one after another. A dense batch gives each sequence m_blocks tiles (its
// query blocks). A packed (varlen) q gives sequence b the tiles from (cu_q[b] + b block_m) /
// block_m on: at least ceil(len_b / block_m) before sequence b + 1's first (FA3's padding), so
// a head takes (total_q + batch block_m) / block_m tiles instead of batch x the longest
// sequence's blocks. Tiles in the gaps are zero and never read back.
struct DqTiles {
  const int32_t* cu_q;  // null: a dense batch
  int64_t batch, m_blocks, head_blocks;
  int block_m;
  TILEATTN_HD static DqTiles make(const int32_t* cu_q, int64_t batch, int64_t m_blocks, int64_t total_q,
                                  int block_m) {
    const int64_t head_blocks = cu_q ? (total_q + batch * block_m) / block_m : batch * m_blocks;
    return DqTiles{cu_q, batch, m_blocks, head_blocks, block_m};
  }
  // The first tile of sequence b within a head (kMayPack false: known to be a dense batch).
  template <bool kMayPack = true>
  TILEATTN_HD int64_t first(int64_t b) const {
    return kMayPack && cu_q ? (cu_q[b] + b * block_m) / block_m : b * m_blocks;
  }
  // Query block m of sequence b, head h.
  template <bool kMayPack = true>
  TILEATTN_HD int64_t tile(int64_t b, int64_t h, int64_t m) const {
    return h * head_blocks + first<kMayPack>(b) + m;
  }
  // The sequence and query block of tile t of a head (t < head_blocks): the last sequence whose
  // first tile is <= t (a gap tile maps to a block past its sequence's rows).
  TILEATTN_HD void locate(int64_t t, int64_t* b, int64_t* m) const {
    if (!cu_q) {
      *b = t / m_blocks, *m = t % m_blocks;
      return;
    }
    int64_t lo = 0, hi = batch - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (first(mid) <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    *b = lo, *m = t - first(lo);
  }
};

// KV heads a launch under a cap of cap_bytes on the fp32 dQ sums (cuda/backward.cc), each KV
// head's taking floats_per_kv floats: as many as fit, one at the least, all of them without a
// cap (cap_bytes <= 0).
inline int64_t dq_group_heads(int64_t cap_bytes, int64_t floats_per_kv, int64_t heads_kv) {
  if (cap_bytes <= 0 || floats_per_kv <= 0) return heads_kv;
  const int64_t fit = cap_bytes / (4 * floats_per_kv);
  return fit < 1 ? 1 : fit > heads_kv ? heads_kv : fit;
}

}  // namespace tileattn::detail::sm90
