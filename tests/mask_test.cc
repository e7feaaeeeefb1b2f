// mask_test.cc: the masking policies (NoMask, CausalMask, WindowMask): per-row [lo, hi) and the
// block helpers agree with a brute-force reading of DESIGN.md section 1.
#include "common/mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

using detail::CausalMask;
using detail::NoMask;
using detail::WindowMask;

// Brute force: query i (aligned at key position i + Lk - Lq) sees key j.
bool brute_sees(int64_t lq, int64_t lk, int64_t left, int64_t right, int64_t i, int64_t j) {
  const int64_t pos = i + lk - lq;
  return j >= 0 && j < lk && (left < 0 || j >= pos - left) && (right < 0 || j <= pos + right);
}

// Checks lo/hi row by row, monotonicity, tile_key_range and block_fully_visible for one mask.
template <class Mask>
void check_policy(const Mask& mask, int64_t lq, int64_t lk, int64_t left, int64_t right,
                  const std::string& what) {
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t lo = mask.lo(i), hi = mask.hi(i);
    EXPECT_GE(lo, 0) << what << " row " << i;
    EXPECT_LE(hi, lk) << what << " row " << i;
    for (int64_t j = 0; j < lk; ++j)
      ASSERT_EQ(j >= lo && j < hi, brute_sees(lq, lk, left, right, i, j))
          << what << " row " << i << " key " << j << " (lo " << lo << ", hi " << hi << ")";
    if (i > 0) {
      EXPECT_LE(mask.lo(i - 1), lo) << what << ": lo must not decrease at row " << i;
      EXPECT_LE(mask.hi(i - 1), hi) << what << ": hi must not decrease at row " << i;
    }
  }
  // Tiles on a grid of several sizes, plus every small range when the problem is small.
  std::vector<std::pair<int64_t, int64_t>> grids = {{1, 1}, {3, 5}, {8, 8}, {64, 64}, {16, 7}};
  for (auto [bq, bk] : grids)
    for (int64_t q0 = 0; q0 < lq; q0 += bq)
      for (int64_t k0 = 0; k0 < lk; k0 += bk) {
        const int64_t q1 = std::min(lq, q0 + bq), k1 = std::min(lk, k0 + bk);
        bool all = true;
        for (int64_t i = q0; i < q1 && all; ++i)
          for (int64_t j = k0; j < k1 && all; ++j) all = brute_sees(lq, lk, left, right, i, j);
        ASSERT_EQ(detail::block_fully_visible(mask, q0, q1, k0, k1), all)
            << what << " tile q[" << q0 << ", " << q1 << ") k[" << k0 << ", " << k1 << ")";
      }
  if (lq <= 12 && lk <= 12)
    for (int64_t q0 = 0; q0 < lq; ++q0)
      for (int64_t q1 = q0 + 1; q1 <= lq; ++q1)
        for (int64_t k0 = 0; k0 < lk; ++k0)
          for (int64_t k1 = k0 + 1; k1 <= lk; ++k1) {
            bool all = true;
            for (int64_t i = q0; i < q1; ++i)
              for (int64_t j = k0; j < k1; ++j) all = all && brute_sees(lq, lk, left, right, i, j);
            ASSERT_EQ(detail::block_fully_visible(mask, q0, q1, k0, k1), all)
                << what << " range q[" << q0 << ", " << q1 << ") k[" << k0 << ", " << k1 << ")";
          }
  // The tile's key range covers every key any of its rows sees.
  for (int64_t bq : {1, 4, 64})
    for (int64_t q0 = 0; q0 < lq; q0 += bq) {
      const int64_t q1 = std::min(lq, q0 + bq);
      int64_t begin, end;
      detail::tile_key_range(mask, q0, q1, &begin, &end);
      for (int64_t i = q0; i < q1; ++i)
        for (int64_t j = 0; j < lk; ++j)
          if (brute_sees(lq, lk, left, right, i, j)) {
            ASSERT_TRUE(j >= begin && j < end)
                << what << " tile q[" << q0 << ", " << q1 << ") misses key " << j;
          }
    }
}

const int64_t kLengths[] = {1, 2, 5, 9, 17, 64, 70};

TEST(Mask, NoMaskSeesEverything) {
  for (int64_t lq : kLengths)
    for (int64_t lk : kLengths) check_policy(NoMask{lk}, lq, lk, -1, -1, "none");
}

TEST(Mask, CausalMatchesBruteForce) {
  for (int64_t lq : kLengths)
    for (int64_t lk : kLengths)
      check_policy(CausalMask{lk, lk - lq}, lq, lk, -1, 0,
                   "causal Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk));
}

TEST(Mask, WindowMatchesBruteForce) {
  const int64_t sides[] = {-1, 0, 1, 3, 16, 100};
  for (int64_t lq : kLengths)
    for (int64_t lk : kLengths)
      for (int64_t left : sides)
        for (int64_t right : sides)
          check_policy(WindowMask{lk, lk - lq, left, right}, lq, lk, left, right,
                       "window(" + std::to_string(left) + ", " + std::to_string(right) +
                           ") Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk));
}

TEST(Mask, CausalShortQueryIsBottomRightAligned) {
  // Lq = 3, Lk = 5: row 0 sits at key 2.
  const CausalMask m{5, 2};
  EXPECT_EQ(m.lo(0), 0);
  EXPECT_EQ(m.hi(0), 3);
  EXPECT_EQ(m.hi(1), 4);
  EXPECT_EQ(m.hi(2), 5);
}

TEST(Mask, CausalLongQueryHasEmptyRows) {
  // Lq = 5, Lk = 3: rows 0 and 1 see nothing, row 2 sees key 0.
  const CausalMask m{3, -2};
  EXPECT_EQ(m.hi(0), 0);
  EXPECT_EQ(m.hi(1), 0);
  EXPECT_EQ(m.hi(2), 1);
  EXPECT_EQ(m.hi(4), 3);
  EXPECT_GE(m.lo(0), m.hi(0));
}

TEST(Mask, WindowLeftAndRight) {
  // Lq = Lk = 10, window (2, 1): row 5 sees keys 3..6.
  const WindowMask w{10, 0, 2, 1};
  EXPECT_EQ(w.lo(5), 3);
  EXPECT_EQ(w.hi(5), 7);
  EXPECT_EQ(w.lo(0), 0);  // clamped at the start
  EXPECT_EQ(w.hi(0), 2);
  EXPECT_EQ(w.lo(9), 7);
  EXPECT_EQ(w.hi(9), 10);  // clamped at the end
  // Left only and right only.
  const WindowMask left_only{10, 0, 3, -1}, right_only{10, 0, -1, 2};
  EXPECT_EQ(left_only.lo(6), 3);
  EXPECT_EQ(left_only.hi(6), 10);
  EXPECT_EQ(right_only.lo(6), 0);
  EXPECT_EQ(right_only.hi(6), 9);
}

TEST(Mask, WindowWithLongQueryHasEmptyRows) {
  // Lq = 8, Lk = 4, window (1, 0): row i sits at key i - 4; rows 0..3 see nothing.
  const WindowMask w{4, -4, 1, 0};
  for (int64_t i = 0; i < 4; ++i) EXPECT_LE(w.hi(i), w.lo(i)) << "row " << i;
  EXPECT_EQ(w.lo(4), 0);
  EXPECT_EQ(w.hi(4), 1);
  EXPECT_EQ(w.lo(7), 2);
  EXPECT_EQ(w.hi(7), 4);
}

TEST(Mask, CausalEqualsWindowWithRightZero) {
  for (int64_t lq : kLengths)
    for (int64_t lk : kLengths) {
      const CausalMask c{lk, lk - lq};
      const WindowMask w{lk, lk - lq, -1, 0};
      for (int64_t i = 0; i < lq; ++i) {
        // lo/hi may differ only on empty rows, where any lo >= hi means the same thing.
        if (w.lo(i) >= w.hi(i)) {
          EXPECT_GE(c.lo(i), c.hi(i));
        } else {
          EXPECT_EQ(c.lo(i), w.lo(i));
          EXPECT_EQ(c.hi(i), w.hi(i));
        }
      }
    }
}

// The GPU kernels' forms of the same masks: the band (per-element test), the key blocks a query
// tile visits, and which of those need per-element masking, against brute force.
template <class Mask>
void check_band_and_blocks(const Mask& mask, int64_t lq, int64_t lk, int64_t left, int64_t right) {
  const detail::Band band = mask.band();
  for (int64_t i = 0; i < lq; ++i)
    for (int64_t j = 0; j < lk; ++j)
      ASSERT_EQ(i + band.lo_diag <= j && j < i + band.hi_diag, brute_sees(lq, lk, left, right, i, j))
          << "band, row " << i << " key " << j;
  for (int64_t block_q : {16, 64})
    for (int64_t block_k : {16, 48})
      for (int64_t q0 = 0; q0 < lq; q0 += block_q) {
        const int64_t q1 = std::min(lq, q0 + block_q);
        int64_t n_begin = 0, n_end = 0;
        detail::key_block_range(mask, q0, q1, block_k, &n_begin, &n_end);
        for (int64_t n = 0; n * block_k < lk; ++n) {
          bool any = false, all = true;
          for (int64_t i = q0; i < q1; ++i)
            for (int64_t j = n * block_k; j < (n + 1) * block_k; ++j) {
              const bool sees = j < lk && brute_sees(lq, lk, left, right, i, j);
              any = any || sees;
              all = all && sees;
            }
          // Every block with a visible key is visited; a visited block that is not entirely
          // visible is flagged for masking.
          if (any) {
            ASSERT_TRUE(n >= n_begin && n < n_end) << "block " << n << " of tile " << q0;
          }
          if (n >= n_begin && n < n_end && !all) {
            ASSERT_TRUE(detail::block_needs_mask(mask, q0, q1, n * block_k, block_k))
                << "block " << n << " of tile " << q0 << " needs a mask";
          }
        }
      }
}

// The GPU kernels' 32-bit TileBand: per-row key ranges, the key blocks of a query tile, the
// query rows of a key block (the backward's walk) and the blocks needing a mask, against brute
// force.
template <class Mask>
void check_tile_band(int64_t lq, int64_t lk, int64_t left, int64_t right) {
  const detail::TileBand band = detail::tile_band<Mask>(lq, lk, left, right);
  for (int i = 0; i < lq; ++i)
    for (int j = 0; j < lk; ++j)
      ASSERT_EQ(j >= band.first(i) && j < band.end(i), brute_sees(lq, lk, left, right, i, j))
          << i << " " << j;
  for (int block : {16, 64})
    for (int k0 = 0; k0 < lk; k0 += block) {
      const int k1 = std::min<int>(lk, k0 + block);
      int q_begin, q_end;
      band.query_rows(k0, k1, static_cast<int>(lq), &q_begin, &q_end);
      for (int i = 0; i < lq; ++i) {
        bool sees = false;
        for (int j = k0; j < k1; ++j) sees = sees || brute_sees(lq, lk, left, right, i, j);
        if (sees) {
          ASSERT_TRUE(i >= q_begin && i < q_end) << "row " << i << " keys " << k0 << ".." << k1;
        }
      }
      for (int q0 = 0; q0 < lq; q0 += 16) {
        const int q1 = std::min<int>(lq, q0 + 16);
        int n_begin, n_end;
        band.key_blocks(q0, q1, block, &n_begin, &n_end);
        bool any = false, all = true;
        for (int i = q0; i < q1; ++i)
          for (int j = k0; j < k0 + block; ++j) {
            const bool s = j < lk && brute_sees(lq, lk, left, right, i, j);
            any = any || s, all = all && s;
          }
        if (any) {
          ASSERT_TRUE(k0 / block >= n_begin && k0 / block < n_end) << q0 << " " << k0;
        }
        if (!all) {
          ASSERT_TRUE(band.needs_mask(q0, q1, k0, block, Mask::kMasks)) << q0 << " " << k0;
        }
      }
    }
}

TEST(Mask, TileBandMatchesBruteForce) {
  for (auto [lq, lk] :
       {std::pair<int64_t, int64_t>{37, 37}, {20, 75}, {75, 20}, {1, 50}, {50, 1}, {130, 70}}) {
    check_tile_band<NoMask>(lq, lk, -1, -1);
    for (auto [left, right] :
         {std::pair<int64_t, int64_t>{-1, 0}, {0, 0}, {5, -1}, {-1, 7}, {3, 11}, {100, 2}, {0, 200}})
      check_tile_band<WindowMask>(lq, lk, left, right);
  }
}

TEST(Mask, BandsAndBlockTripCountsMatchBruteForce) {
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{37, 37}, {20, 75}, {75, 20}, {1, 50}, {50, 1}}) {
    check_band_and_blocks(NoMask{lk}, lq, lk, -1, -1);
    check_band_and_blocks(CausalMask{lk, lk - lq}, lq, lk, -1, 0);
    for (auto [left, right] : {std::pair<int64_t, int64_t>{0, 0}, {5, -1}, {-1, 7}, {3, 11}, {100, 2}})
      check_band_and_blocks(WindowMask{lk, lk - lq, left, right}, lq, lk, left, right);
  }
}

}  // namespace
}  // namespace tileattn::test
