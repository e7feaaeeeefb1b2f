// sm90_dq_order_test.cc: the sm90 backward's deterministic dQ order (cuda/sm90/bwd_order.h)
// replayed on the CPU. One (batch, KV head): CTAs start in launch order on `slots` SMs, a step
// takes one time unit, and a step's addition waits until its query block's counter reads the
// CTA's turn. The replay checks that the key blocks visiting a query block are exactly those
// that see it, that every turn comes (no cycle, whatever the SM count), and how long it takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_order.h"

namespace tileattn::detail::sm90 {
namespace {

// The backward's block sizes (bwd.h), (block_m, block_n): D = 128 (under a mask and without),
// D = 64, D = 256.
constexpr std::pair<int, int> kBlocks[] = {{bwd_block_m(128, true), bwd_block_n(128)},
                                           {bwd_block_m(128, false), bwd_block_n(128)},
                                           {bwd_block_m(64, true), bwd_block_n(64)},
                                           {bwd_block_m(256, true), bwd_block_n(256)}};

struct Replay {
  bool ok = true;        // every turn came, every block summed by exactly its key blocks
  int64_t makespan = 0;  // time units until the last CTA ends
  int64_t work = 0;      // steps of all CTAs: the SM time they need
  int64_t resident = 0;  // SM time they hold, waits included
};

// delayed: a raised counter is seen from the next time unit on (an addition's completion takes
// time), else at once (ties count as no wait).
template <class Mask>
Replay replay(std::pair<int, int> blocks, int len_q, int len_k, int left, int right, int group,
              bool deterministic_banded, int slots, bool delayed = false) {
  const auto [kM, kN] = blocks;
  const TileBand band = tile_band<Mask>(len_q, len_k, left, right);
  const int n_blocks = (len_k + kN - 1) / kN, m_blocks = (len_q + kM - 1) / kM;
  const DqOrder order{deterministic_banded};
  struct Cta {
    int n, m_begin, m_count;
    int64_t steps, step = 0, ready = 0, start = 0;
    bool defer, reached = false;
    int raise = -1;
  };
  std::vector<Cta> ctas;
  Replay r;
  for (int pos = 0; pos < n_blocks; ++pos) {
    Cta c{};
    c.n = order.key_block(pos, n_blocks);
    int prev_begin = 0, prev_count = 0;
    bwd_query_blocks(band, c.n, len_q, kM, kN, &c.m_begin, &c.m_count);
    if (c.n > 0) bwd_query_blocks(band, c.n - 1, len_q, kM, kN, &prev_begin, &prev_count);
    c.defer = order.deferred(c.n, c.m_begin, prev_begin);
    c.steps = int64_t{c.m_count} * group;
    r.work += c.steps;
    ctas.push_back(c);
  }
  // The visits agree with key_blocks: block m is visited by exactly [nb, ne).
  for (int m = 0; m < m_blocks; ++m) {
    int nb = 0, ne = 0;
    band.key_blocks(m * kM, std::min(m * kM + kM, len_q), kN, &nb, &ne);
    for (const Cta& c : ctas)
      if ((c.n >= nb && c.n < ne) != (m >= c.m_begin && m < c.m_begin + c.m_count)) r.ok = false;
  }
  std::vector<int> counter(static_cast<size_t>(m_blocks) * group, 0), last(counter.size(), -1);
  size_t next = 0, running = 0, done = 0;
  std::vector<size_t> live;
  std::vector<int> raised;  // delayed: counters raised in this time unit, seen from the next one
  bool moved = true;
  auto raise_counter = [&](int blk) {
    if (delayed)
      raised.push_back(blk);
    else
      ++counter[blk], moved = true;
  };
  for (int64_t t = 0; done < ctas.size(); ++t) {
    for (int blk : raised) ++counter[blk];
    raised.clear();
    if (t > 4 * (int64_t{m_blocks} * group + n_blocks) * (n_blocks + 1)) return r.ok = false, r;  // a cycle
    while (running < static_cast<size_t>(slots) && next < ctas.size()) {
      ctas[next].start = t, ctas[next].ready = t + 1;
      live.push_back(next++), ++running;
    }
    for (moved = true; moved;) {  // raises (not delayed) and ends may enable others in the same unit
      moved = false;
      for (size_t& i : live) {
        if (i == SIZE_MAX) continue;
        Cta& c = ctas[i];
        if (c.step == c.steps) {  // ends: its last deferred raise
          if (c.raise >= 0) raise_counter(c.raise);
          i = SIZE_MAX, --running, ++done, moved = true;
          r.makespan = std::max(r.makespan, t);
          r.resident += t - c.start;
          continue;
        }
        if (c.ready > t) continue;
        const int h = static_cast<int>(c.step / c.m_count),
                  m = c.m_begin + static_cast<int>(c.step % c.m_count);
        const int blk = h * m_blocks + m;
        if (!c.reached && c.raise >= 0) raise_counter(c.raise), c.raise = -1;
        c.reached = true;
        int nb = 0, ne = 0;
        band.key_blocks(m * kM, std::min(m * kM + kM, len_q), kN, &nb, &ne);
        if (counter[blk] != order.turn(c.n, nb, ne)) continue;
        if (c.defer)
          c.raise = blk;
        else
          raise_counter(blk);
        last[blk] = c.n;
        ++c.step, c.ready = t + 1, c.reached = false, moved = true;
      }
    }
  }
  for (int blk : raised) ++counter[blk];  // the last time unit's
  for (int h = 0; h < group; ++h)
    for (int m = 0; m < m_blocks; ++m) {
      int nb = 0, ne = 0;
      band.key_blocks(m * kM, std::min(m * kM + kM, len_q), kN, &nb, &ne);
      const int blk = h * m_blocks + m;
      if (counter[blk] != ne - nb) r.ok = false;  // every contributor added once
      if (ne > nb && last[blk] != (deterministic_banded ? nb : ne - 1)) r.ok = false;
    }
  return r;
}

TEST(Sm90DqOrder, EveryTurnComesOnAnySmCount) {
  for (auto block_m : kBlocks)
    for (int slots : {1, 3, 132})
      for (int group : {1, 2}) {
        SCOPED_TRACE("block_m " + std::to_string(block_m.first) + " block_n " +
                     std::to_string(block_m.second) + " slots " + std::to_string(slots) + " group " +
                     std::to_string(group));
        for (auto [lq, lk] : {std::pair{1024, 1024}, {1000, 3000}, {3000, 1000}, {65, 129}, {1, 700}}) {
          SCOPED_TRACE(std::to_string(lq) + " x " + std::to_string(lk));
          EXPECT_TRUE((replay<NoMask>(block_m, lq, lk, -1, -1, group, false, slots).ok));
          EXPECT_TRUE((replay<WindowMask>(block_m, lq, lk, -1, 0, group, true, slots).ok));     // causal
          EXPECT_TRUE((replay<WindowMask>(block_m, lq, lk, 256, 0, group, true, slots).ok));    // sliding
          EXPECT_TRUE((replay<WindowMask>(block_m, lq, lk, 100, 100, group, true, slots).ok));  // both sides
          EXPECT_TRUE((replay<WindowMask>(block_m, lq, lk, -1, 0, group, false, slots).ok));    // ascending
        }
      }
}

// Causal, every key block on its own SM: in the banded order no CTA waits (it holds its SM for
// its steps alone), where ascending n holds key block n on its SM until key block 0 reaches n's
// first query block: about twice the SM time (at block_m 64 of block_n 128; where block_m =
// block_n a key block's first query block comes one step after its predecessor's, not two).
// With Lk > Lq the first key blocks all start on query block 0 (every row sees them) and raise
// at once, or each would wait a step for the last. With Lq = Lk no CTA waits either when a
// raise is only seen a step later: the deferred raises (block_n = 2 block_m) come a step before
// they are needed, the immediate ones (block_m = block_n, where a deferred raise would come
// exactly when needed) a step before too.
TEST(Sm90DqOrder, CausalRunsWithoutWaiting) {
  for (auto block_m : kBlocks)
    for (auto [lq, lk] : {std::pair{1024, 1024}, {4096, 4096}, {8192, 8192}, {1024, 4096}})
      for (int group : {1, 4}) {
        SCOPED_TRACE("block_m " + std::to_string(block_m.first) + " block_n " +
                     std::to_string(block_m.second) + " " + std::to_string(lq) + " x " + std::to_string(lk) +
                     " group " + std::to_string(group));
        const bool two = block_m.second == 2 * block_m.first;  // a key block's first query block two steps on
        const Replay banded = replay<WindowMask>(block_m, lq, lk, -1, 0, group, true, 132);
        const Replay ascending = replay<WindowMask>(block_m, lq, lk, -1, 0, group, false, 132);
        ASSERT_TRUE(banded.ok && ascending.ok);
        EXPECT_EQ(banded.resident, banded.work);
        if (lq == lk) {
          const Replay delayed = replay<WindowMask>(block_m, lq, lk, -1, 0, group, true, 132, true);
          ASSERT_TRUE(delayed.ok);
          EXPECT_EQ(delayed.resident, delayed.work);
          EXPECT_GE(ascending.resident, (two ? 3 : 5) * ascending.work / (two ? 2 : 4));
        }
      }
}

// The grouped launch order (deterministic mode without a mask; a 2-D grid, x fastest) is a
// permutation of the tiles in which each pair's key blocks come in ascending launch position, so
// every wait is on a CTA launched before.
TEST(Sm90DqOrder, GroupedTilesArePairwiseAscending) {
  for (int64_t n_blocks : {1, 3, 8, 64})
    for (int64_t pairs : {8, 16, 24})
      for (int log2 : {0, 1, 2, 3}) {
        SCOPED_TRACE(std::to_string(n_blocks) + " blocks, " + std::to_string(pairs) + " pairs, group " +
                     std::to_string(1 << log2));
        std::vector<int64_t> seen(n_blocks * pairs, -1), next(pairs, 0);
        const int64_t xs = n_blocks << log2, ys = pairs >> log2;
        for (int64_t y = 0; y < ys; ++y)
          for (int64_t x = 0; x < xs; ++x) {
            const int64_t linear = grouped_tile(x, y, n_blocks, log2);
            ASSERT_TRUE(linear >= 0 && linear < n_blocks * pairs);
            ASSERT_EQ(seen[linear], -1);
            seen[linear] = y * xs + x;
            const int64_t pair = linear / n_blocks;
            EXPECT_EQ(pair >> log2, y);                  // the group's own pairs
            EXPECT_EQ(linear % n_blocks, next[pair]++);  // the pair's key blocks in order
          }
      }
  EXPECT_EQ(grouped_tile(5, 0, 4, 1), 1 * 4 + 2);  // group 0 (pairs 0, 1): x = 5 is pair 1, block 2
  EXPECT_EQ(grouped_tile(3, 1, 4, 1), 3 * 4 + 1);  // group 1 (pairs 2, 3): x = 3 is pair 3, block 1
  EXPECT_EQ(grouped_tile(7, 2, 5, 0), 2 * 5 + 7);  // no group: the plain order
}

// The group under an L2 budget: Q, dO and the fp32 dQ sums of a pair (8 bytes a query row's
// element) times the group fit the budget; a divisor of the pairs; 0 (the plain order) without a
// budget.
TEST(Sm90DqOrder, PairGroupFitsTheBudget) {
  const int64_t mib = int64_t{1} << 20;
  EXPECT_EQ(det_pair_group_log2(1024, 64, 32, 16 * mib), 3);    // 0.5 MiB a pair: 8
  EXPECT_EQ(det_pair_group_log2(4096, 64, 32, 16 * mib), 3);    // 2 MiB: 8 x 2 fits exactly
  EXPECT_EQ(det_pair_group_log2(4096, 128, 32, 16 * mib), 2);   // 4 MiB: 4
  EXPECT_EQ(det_pair_group_log2(4096, 256, 32, 16 * mib), 1);   // 8 MiB: 2
  EXPECT_EQ(det_pair_group_log2(16384, 128, 32, 16 * mib), 0);  // 16 MiB: 2 pairs do not fit
  EXPECT_EQ(det_pair_group_log2(1024, 64, 12, 16 * mib), 2);    // 8 does not divide 12 pairs
  EXPECT_EQ(det_pair_group_log2(1024, 64, 6, 16 * mib), 1);
  EXPECT_EQ(det_pair_group_log2(1024, 64, 7, 16 * mib), 0);  // no divisor
  EXPECT_EQ(det_pair_group_log2(1024, 64, 1, 16 * mib), 0);
  EXPECT_EQ(det_pair_group_log2(16, 64, 2 * 65535, 16 * mib), 1);  // 65535 groups of 2 in y
  EXPECT_EQ(det_pair_group_log2(16, 64, 2 * 65537, 16 * mib), 0);  // 65537: past the grid's y
  EXPECT_EQ(det_pair_group_log2(1024, 64, 32, 0), 0);              // no budget: the plain order
  EXPECT_EQ(det_pair_group_log2(0, 64, 32, 16 * mib), 0);          // no rows
}

}  // namespace
}  // namespace tileattn::detail::sm90
