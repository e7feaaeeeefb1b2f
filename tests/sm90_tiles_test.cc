// sm90_tiles_test.cc: the sm90 kernel's tile plan as pure functions (no GPU): when query heads
// of one KV head are packed into a tile (GQA packing), and the boxes a paged cache's key block
// loads as.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/tile_order.h"

namespace tileattn::detail::sm90 {
namespace {

TEST(Sm90Tiles, PacksGroupsWhenThatMakesFewerTiles) {
  EXPECT_EQ(pack_factor(1, 8, 128), 8);     // decoding: 1 tile for the group instead of 8
  EXPECT_EQ(pack_factor(40, 4, 128), 4);    // 2 tiles instead of 4
  EXPECT_EQ(pack_factor(60, 64, 192), 64);  // 20 instead of 64
  EXPECT_EQ(pack_factor(1, 2, 192), 2);
}

TEST(Sm90Tiles, KeepsOneHeadATileOtherwise) {
  EXPECT_EQ(pack_factor(1, 1, 128), 1);     // no group
  EXPECT_EQ(pack_factor(4096, 8, 128), 1);  // full tiles: the same count either way
  EXPECT_EQ(pack_factor(100, 4, 128), 1);   // 4 tiles either way
  EXPECT_EQ(pack_factor(1, 3, 128), 1);     // 3 does not divide a consumer's 64 rows
  EXPECT_EQ(pack_factor(1, 128, 128), 1);   // nor does 128
}

TEST(Sm90Tiles, PackedGroupsDivideEveryTile) {
  for (int block_m : {128, 192})
    for (long long lq : {1, 17, 63, 65, 1000})
      for (long long group : {1, 2, 3, 4, 6, 8, 16, 32, 64, 128}) {
        const int pack = pack_factor(lq, group, block_m);
        EXPECT_TRUE(pack == 1 || pack == group) << lq << " " << group;
        EXPECT_EQ(64 % pack, 0) << lq << " " << group;
        EXPECT_EQ(block_m % pack, 0) << lq << " " << group;
      }
}

TEST(Sm90Tiles, PagedBlocksLoadAsBoxesWithinOnePage) {
  EXPECT_EQ(page_box(16, 128), 16);    // 8 boxes a block
  EXPECT_EQ(page_box(8, 128), 8);      // one swizzle atom a box
  EXPECT_EQ(page_box(256, 128), 128);  // a block in one page
  EXPECT_EQ(page_box(48, 128), 16);    // pages that straddle blocks
  EXPECT_EQ(page_box(64, 80), 16);     // D = 256's blocks of 80
  EXPECT_EQ(page_box(80, 80), 80);
  EXPECT_EQ(page_box(1, 128), 0);  // boxes of less than a swizzle atom: the sm80 kernel
  EXPECT_EQ(page_box(7, 128), 0);
  EXPECT_EQ(page_box(20, 128), 0);  // gcd 4
  EXPECT_EQ(page_box(0, 128), 0);
  for (long long page = 1; page <= 1024; ++page)
    for (int block_n : {80, 128}) {
      const int box = page_box(page, block_n);
      if (box == 0) continue;
      EXPECT_EQ(page % box, 0) << page;  // a box never crosses a page
      EXPECT_EQ(block_n % box, 0) << page;
      EXPECT_EQ(box % 8, 0) << page;
      EXPECT_LE(block_n / box, 32) << page;  // one page index per producer lane
    }
}

// The tuning order lpt_tile (TileConfig::lpt_mib) names every (m-block, pair) once, takes each
// section's pairs at one m-block before the next smaller one, and keeps to its section.
TEST(Sm90Tiles, LongestFirstOrderIsAPermutation) {
  for (int64_t m_blocks : {1, 3, 8})
    for (int64_t pairs : {1, 5, 32})
      for (int64_t section : {1, 3, 32, 64}) {
        SCOPED_TRACE(std::to_string(m_blocks) + " m-blocks, " + std::to_string(pairs) +
                     " pairs, sections of " + std::to_string(section));
        std::vector<int> seen(m_blocks * pairs, 0);
        int64_t last_section = 0, last_m = m_blocks;
        for (int64_t tile = 0; tile < m_blocks * pairs; ++tile) {
          const TileSlot s = lpt_tile(tile, m_blocks, pairs, section);
          ASSERT_TRUE(s.m_block >= 0 && s.m_block < m_blocks && s.pair >= 0 && s.pair < pairs);
          ++seen[s.pair * m_blocks + s.m_block];
          const int64_t sec = s.pair / section;
          ASSERT_GE(sec, last_section);  // sections in order
          if (sec == last_section) {
            EXPECT_LE(s.m_block, last_m);  // longest first within one
          }
          last_section = sec, last_m = s.m_block;
        }
        for (int c : seen) EXPECT_EQ(c, 1);
      }
  EXPECT_EQ(lpt_tile(0, 4, 6, 4).m_block, 3);  // the first section's pairs 0-3 at their last m-block
  EXPECT_EQ(lpt_tile(5, 4, 6, 4).pair, 1);     // then at m-block 2
  EXPECT_EQ(lpt_tile(5, 4, 6, 4).m_block, 2);
  EXPECT_EQ(lpt_tile(17, 4, 6, 4).pair, 5);  // the short last section: pairs 4, 5
  EXPECT_EQ(lpt_tile(17, 4, 6, 4).m_block, 3);
  EXPECT_EQ(lpt_section(24, 1 << 20, 100), 24);   // 24 pairs of 1 MiB
  EXPECT_EQ(lpt_section(24, 1 << 20, 10), 10);    // no more than the pairs
  EXPECT_EQ(lpt_section(1, 4 << 20, 10), 1);      // at least one
  EXPECT_EQ(lpt_section(-1, 1 << 20, 100), 100);  // one section
}

}  // namespace
}  // namespace tileattn::detail::sm90
