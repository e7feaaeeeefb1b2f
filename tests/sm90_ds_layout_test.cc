// sm90_ds_layout_test.cc: the sm90 backward's dS store and dQ staging (bwd_layout.h) replayed
// on the CPU. Each thread's stmatrix .x4 .trans (its semantics checked on the device by
// Sm90Blocks.StmatrixTransStoresColumnsAsRows) must put every element of dS^T, key r and query
// c, at dS's swizzled offset of (c, r), and fill the chunk's block_m x 64 elements once each.
// dQ's accumulators, stored by the consumers in their order, must be read back by dq_convert's
// mapping (dq_accum_pos) at their own row and column.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_layout.h"

namespace tileattn::detail::sm90 {
namespace {

TEST(Sm90DsLayout, StmatrixStoresEveryElementOfDsTransposedOnce) {
  for (int block_m : {64, 80, 128}) {  // bwd_block_m at D = 128 (masked or not) and 64
    SCOPED_TRACE("block_m " + std::to_string(block_m));
    std::vector<int> hits(block_m * 64, 0);  // per 16-bit word of the chunk
    for (int warp = 0; warp < 4; ++warp)
      for (int m = 0; m < block_m / 16; ++m)
        for (int q = 0; q < 4; ++q)        // register fs[m][q]: elements 8 m + 2 q and + 1
          for (int i = 0; i < 8; ++i)      // memory row i of the matrix, from lane 8 q + i
            for (int k = 0; k < 8; ++k) {  // its 16-bit word k: the matrix's element (row k, column i)
              const int row_addr = ds_stmatrix_offset(m, warp, 8 * q + i);
              const int holder = 4 * k + i / 2, e = 8 * m + 2 * q + i % 2;  // the lane holding it
              const int key = acc_row(e, warp, holder), query = acc_col(e, holder);
              ASSERT_EQ(row_addr % 16, 0);
              ASSERT_EQ(row_addr + 2 * k, ds_offset(query, key))
                  << "warp " << warp << " m " << m << " q " << q << " row " << i << " word " << k;
              ++hits[(row_addr + 2 * k) / 2];
            }
    for (int w = 0; w < block_m * 64; ++w) ASSERT_EQ(hits[w], 1) << "word " << w;
  }
}

// The consumer of part w stores its dQ accumulators dq[4 g .. 4 g + 3] as float4 g * 128 +
// thread of part w (bwd_kernel.cuh, bwd_pair.cuh); element j of them is (acc_row(4 g + j),
// acc_col(4 g + j)) of part w: an m64n64 tile of dQ, or at 80 rows an m64n80 tile of dQ^T (64
// columns of D by the 80 rows).
TEST(Sm90DsLayout, DqAccumulatorsReadBackAtTheirRowAndColumn) {
  struct Case {
    int head_dim;
    bool window;
  };
  for (const Case k : {Case{64, true}, Case{128, true}, Case{128, false}, Case{256, true}}) {
    const int head_dim = k.head_dim, block_m = bwd_block_m(head_dim, k.window);
    const bool transposed = bwd_dq_transposed(block_m);
    const int parts = head_dim == 256 ? 4 : 2, regs = transposed ? block_m / 2 : 32;
    SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " block_m " + std::to_string(block_m));
    std::vector<int> hits(block_m * head_dim, 0);
    for (int w = 0; w < parts; ++w)
      for (int t = 0; t < 128; ++t)
        for (int g = 0; g < regs / 4; ++g) {
          int row = -1, col = -1;
          dq_accum_pos((w * regs / 4 + g) * 128 + t, head_dim, block_m, &row, &col);
          for (int j = 0; j < 4; ++j) {
            const int e = 4 * g + j;
            int r = dq_part_row(w, head_dim) + acc_row(e, t / 32, t % 32);
            int c = dq_part_col(w, head_dim) + acc_col(e, t % 32);
            if (transposed) r = acc_col(e, t % 32), c = 64 * w + acc_row(e, t / 32, t % 32);
            const int dr = transposed ? j % 2 : 8 * (j / 2), dc = transposed ? 8 * (j / 2) : j % 2;
            ASSERT_EQ(r, row + dr) << "w " << w << " t " << t << " g " << g << " j " << j;
            ASSERT_EQ(c, col + dc) << "w " << w << " t " << t << " g " << g << " j " << j;
            ASSERT_LT(r, block_m);
            ASSERT_LT(c, head_dim);
            ++hits[r * head_dim + c];
          }
        }
    for (int i = 0; i < block_m * head_dim; ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
  }
}

// dq_accum's tiles (DqTiles): every query block of every sequence and head gets a tile of its
// own within the buffer, and dq_convert's lookup (locate) finds each tile's sequence and block;
// the padding tiles between packed sequences map to rows past their sequence (never written
// back). Packed batches with empty sequences and lengths on and off the block grid, and dense.
TEST(Sm90DsLayout, DqTilesGiveEveryQueryBlockItsOwnTileAndFindItBack) {
  const std::vector<std::vector<int32_t>> batches = {
      {17, 0, 113, 1, 300}, {64}, {0}, {128, 128, 0, 0, 1, 65, 63, 1025}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
  for (int block_m : {64, 80, 128})
    for (const auto& lens : batches)
      for (bool packed : {true, false}) {
        SCOPED_TRACE("block_m " + std::to_string(block_m) + (packed ? " packed" : " dense"));
        std::vector<int32_t> cu = {0};
        int32_t longest = 0;
        for (int32_t l : lens) cu.push_back(cu.back() + l), longest = std::max(longest, l);
        const int64_t batch = static_cast<int64_t>(lens.size()), heads = 3;
        const int64_t m_blocks = (longest + block_m - 1) / block_m;
        const DqTiles tiles =
            DqTiles::make(packed ? cu.data() : nullptr, batch, m_blocks, cu.back(), block_m);
        std::vector<int> owner(heads * tiles.head_blocks, 0);
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t b = 0; b < batch; ++b) {
            const int64_t len = packed ? lens[b] : longest;
            for (int64_t m = 0; m * block_m < len; ++m) {
              const int64_t t = tiles.tile(b, h, m);
              ASSERT_GE(t, h * tiles.head_blocks);
              ASSERT_LT(t, (h + 1) * tiles.head_blocks) << "b " << b << " m " << m;
              ASSERT_EQ(owner[t]++, 0) << "tile " << t << " twice";
              if (!packed) {
                ASSERT_EQ(t, tiles.tile<false>(b, h, m));
              }
              int64_t fb = -1, fm = -1;
              tiles.locate(t % tiles.head_blocks, &fb, &fm);
              ASSERT_EQ(fb, b);
              ASSERT_EQ(fm, m);
            }
          }
        for (int64_t t = 0; t < tiles.head_blocks; ++t) {
          if (owner[t]) continue;
          int64_t fb = -1, fm = -1;
          tiles.locate(t, &fb, &fm);
          ASSERT_TRUE(fb >= 0 && fb < batch && fm >= 0) << "tile " << t;
          ASSERT_GE(fm * block_m, packed ? lens[fb] : longest) << "gap tile " << t << " reads back rows";
        }
        if (packed) {
          ASSERT_LE(tiles.head_blocks * block_m, cu.back() + batch * block_m);
        }
      }
}

// Staged dK / dV (bwd_kernel.cuh: bwd_store_staged): every (key, column) of a consumer's 64 x D
// tile written once by the accumulator pairs and read back by the 16-byte row chunks at its own
// place; a warp's pair stores and each 8 threads' chunk reads (a 128-byte phase) hit distinct
// banks.
TEST(Sm90DsLayout, StagedDkDvCoversTheTileWithoutBankConflicts) {
  for (int head_dim : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    std::vector<int> owner(64 * head_dim, -1);  // the (row, column) each element offset holds
    for (int warp = 0; warp < 4; ++warp)
      for (int e = 0; e < head_dim / 2; e += 2) {
        std::vector<int> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const int r = acc_row(e, warp, lane), c = acc_col(e, lane);
          ASSERT_EQ(acc_row(e + 1, warp, lane), r);
          ASSERT_EQ(acc_col(e + 1, lane), c + 1);
          const int off = dkdv_stage_offset(r, c, head_dim);
          ASSERT_EQ(off % 2, 0);
          ASSERT_EQ(dkdv_stage_offset(r, c + 1, head_dim), off + 1);
          for (int j = 0; j < 2; ++j) {
            ASSERT_EQ(owner[off + j], -1) << "offset " << off + j << " twice";
            owner[off + j] = r * head_dim + c + j;
          }
          banks.push_back(off / 2 % 32);  // 4-byte words
        }
        std::sort(banks.begin(), banks.end());
        ASSERT_EQ(std::unique(banks.begin(), banks.end()), banks.end()) << "warp " << warp << " e " << e;
      }
    const int chunks = head_dim / 8;
    for (int i = 0; i < 64 * chunks; i += 8) {  // threads i .. i + 7: one 128-byte phase
      std::vector<int> banks;
      for (int t = i; t < i + 8; ++t) {
        const int r = t / chunks, c = 8 * (t % chunks), off = dkdv_stage_offset(r, c, head_dim);
        ASSERT_EQ(off % 8, 0);
        for (int j = 0; j < 8; ++j)
          ASSERT_EQ(owner[off + j], r * head_dim + c + j) << "row " << r << " col " << c;
        banks.push_back(off / 8 % 8);  // 16-byte bank groups
      }
      std::sort(banks.begin(), banks.end());
      ASSERT_EQ(std::unique(banks.begin(), banks.end()), banks.end()) << "threads " << i;
    }
  }
}

// Under a cap on the fp32 dQ sums the KV heads go in groups of as many as fit, one at the least.
TEST(Sm90DqLayout, KvHeadGroupsFitTheCap) {
  const int64_t per_kv = 2 * 5 * 64 * 128;  // floats of one KV head's sums
  EXPECT_EQ(dq_group_heads(0, per_kv, 8), 8);
  EXPECT_EQ(dq_group_heads(-5, per_kv, 8), 8);
  EXPECT_EQ(dq_group_heads(1, per_kv, 8), 1);
  EXPECT_EQ(dq_group_heads(4 * per_kv - 1, per_kv, 8), 1);
  EXPECT_EQ(dq_group_heads(3 * 4 * per_kv, per_kv, 8), 3);
  EXPECT_EQ(dq_group_heads(3 * 4 * per_kv - 1, per_kv, 8), 2);
  EXPECT_EQ(dq_group_heads(int64_t{1} << 40, per_kv, 8), 8);
  EXPECT_EQ(dq_group_heads(1 << 20, 0, 8), 8);  // no sums (empty sequences)
}

}  // namespace
}  // namespace tileattn::detail::sm90
