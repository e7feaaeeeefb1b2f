// bwd_order.h: the order of the sm90 backward's dQ additions in deterministic mode, shared by
// the kernel (bwd_kernel.cuh) and the CPU test that replays it (tests/sm90_dq_order_test.cc).
//
// Each query block's dQ is summed over the key blocks [nb, ne) that see it, one bulk addition a
// key block, in a fixed order kept by a counter per (batch, head, query block): key block n adds
// when the counter reads its turn, then raises it. A CTA walks its query blocks in ascending
// order and only ever waits for CTAs launched before it, so the waits cannot close a cycle.
//   - Full (no mask): ascending n, in launch order. Every CTA visits block m at the same step;
//     after the first step they run staggered by one addition each.
//   - Banded (causal, windows): key block n's first query block comes later the larger n is,
//     so ascending n would hold CTA n until CTA 0 reached its first block. The CTAs launch from
//     the last key block down and add in descending n: the key block before a CTA in the order
//     visited the block block_n / block_m steps earlier (two at D = 128's 64-row blocks, one at
//     D = 64's 128 and at D = 256's 64 keys), so nobody waits. A CTA whose successor n - 1 starts two or more
//     query blocks earlier raises its counter at its next addition, when the addition has long completed,
//     instead of waiting for the completion right after issuing it (its successor needs it a step after
//     that); with one block between them (block_m = block_n) it raises once its addition completes, as the
//     successor needs it at its next step. Key blocks that start on the same query block (those every query
//     row sees, Lk > Lq) visit it at the same step and raise at once.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "common/host_device.h"
#include "common/mask.h"

namespace tileattn::detail::sm90 {

// The query blocks [*m_begin, *m_begin + *m_count) of block_m rows that key block n (of block_n
// keys) visits: those with a row that may see one of its keys (TileBand::query_rows).
TILEATTN_HD void bwd_query_blocks(const TileBand& band, int n, int len_q, int block_m, int block_n,
                                  int* m_begin, int* m_count) {
  int q_begin = 0, q_end = 0;
  const int k0 = n * block_n, k1 = k0 + block_n < band.len_k ? k0 + block_n : band.len_k;
  if (len_q > 0 && k0 < k1) band.query_rows(k0, k1, len_q, &q_begin, &q_end);
  *m_begin = q_begin / block_m;
  *m_count = q_end > q_begin ? (q_end + block_m - 1) / block_m - *m_begin : 0;
}

// Deterministic mode's launch order without a mask: the key blocks of 2^group_log2 (batch, KV
// head) pairs interleaved, so a wave holds fewer key blocks of each pair and their turns at a
// query block chain over fewer CTAs (tune_sm90_bwd). The grid is 2-D (launch_bwd): blockIdx.y a
// group of pairs, blockIdx.x its key blocks, pair fastest; CTAs launch x fastest, so within a
// pair the key blocks still come in ascending order and a CTA still waits only for CTAs launched
// before it. Returns the library's tile index (pairs major, key block fastest). Shifts and masks
// only: the tile's values stay in uniform registers.
TILEATTN_HD int64_t grouped_tile(int64_t x, int64_t y, int64_t n_blocks, int group_log2) {
  const int64_t in_group = x & ((int64_t{1} << group_log2) - 1);
  return ((y << group_log2) + in_group) * n_blocks + (x >> group_log2);
}

// log2 of the group for grouped_tile under an L2 budget: the most of 8, 4 and 2 pairs that divides
// `pairs` (no short group) and whose Q and dO (2 bytes an element) and fp32 dQ sums (4) fit
// budget_bytes, each pair holding rows_per_pair query rows (its query heads' rows) of head_dim;
// 0, the plain order, when none does, when budget_bytes <= 0, or when the groups would pass the
// grid's 65535 in y. Interleaved pairs gain while their rows stay in L2 and lose once they do not
// (docs/kernels/sm90_backward.md, "Deterministic mode"; measured in docs/kernels/sm90_log.md).
inline int det_pair_group_log2(int64_t rows_per_pair, int64_t head_dim, int64_t pairs, int64_t budget_bytes) {
  const int64_t pair_bytes = rows_per_pair * head_dim * (2 + 2 + 4);
  for (int log2 : {3, 2, 1}) {
    const int64_t group = int64_t{1} << log2;
    if (pairs % group == 0 && pairs / group <= 65535 && pair_bytes > 0 && group * pair_bytes <= budget_bytes)
      return log2;
  }
  return 0;
}

struct DqOrder {
  bool banded;  // the mask limits which query blocks a key block sees (Mask::kMasks)
  // The key block of the CTA at `position` (0 first launched) of its (batch, KV head).
  TILEATTN_HD int key_block(int position, int n_blocks) const {
    return banded ? n_blocks - 1 - position : position;
  }
  // How many additions to a query block seen by key blocks [nb, ne) come before key block n's.
  TILEATTN_HD int turn(int n, int nb, int ne) const { return banded ? ne - 1 - n : n - nb; }
  // Whether key block n raises its counters at its next addition (or its end) rather than
  // right after each one: m_begin of n and of n - 1 (bwd_kernel.cuh: TileBand::query_rows).
  TILEATTN_HD bool deferred(int n, int first_block, int successor_first_block) const {
    return banded && (n == 0 || successor_first_block + 1 < first_block);
  }
};

}  // namespace tileattn::detail::sm90
