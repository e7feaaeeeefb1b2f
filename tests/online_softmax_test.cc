// online_softmax_test.cc: the per-row online-softmax state (SoftmaxRow): split-and-merge equals
// the whole, fully masked rows, huge logits, conditional vs always rescaling, the threshold.
#include "common/online_softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

using detail::SoftmaxRow;

constexpr int kD = 5;  // value width: enough to see O rows mix

// One partial row: the state, its unnormalized O, fed with logits (log2 units) block by block
// exactly as a kernel does: advance to the block max, rescale O, weights exp2(s - base).
struct PartialRow {
  SoftmaxRow st;
  std::vector<float> o = std::vector<float>(kD, 0.0f);

  void feed(const std::vector<float>& s, const std::vector<std::vector<float>>& v,
            const std::vector<int>& keys, size_t block, bool conditional) {
    for (size_t b0 = 0; b0 < keys.size(); b0 += block) {
      const size_t b1 = std::min(keys.size(), b0 + block);
      float block_max = -INFINITY;
      for (size_t t = b0; t < b1; ++t) block_max = std::max(block_max, s[keys[t]]);
      const float alpha = st.advance(block_max, conditional);
      for (float& x : o) x *= alpha;
      float sum = 0.0f;
      for (size_t t = b0; t < b1; ++t) {
        const float p = std::exp2(s[keys[t]] - st.base());
        sum += p;
        for (int d = 0; d < kD; ++d) o[d] += p * v[keys[t]][d];
      }
      st.add(sum);
    }
  }

  void merge(const PartialRow& other) {
    float a, b;
    st.merge(other.st, &a, &b);
    for (int d = 0; d < kD; ++d) o[d] = o[d] * a + other.o[d] * b;
  }

  std::vector<float> final_out() const {
    std::vector<float> out(kD);
    for (int d = 0; d < kD; ++d) out[d] = o[d] * st.inv_l();
    return out;
  }
};

// The truth in double: softmax over the given keys of logits in log2 units.
struct Exact {
  std::vector<double> out = std::vector<double>(kD, 0.0);
  double lse = -INFINITY;  // natural log
};

Exact exact(const std::vector<float>& s, const std::vector<std::vector<float>>& v) {
  Exact e;
  double m = -INFINITY;
  for (float x : s) m = std::max(m, static_cast<double>(x));
  if (m == -INFINITY) return e;
  double l = 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp2(static_cast<double>(s[j]) - m);
    l += p;
    for (int d = 0; d < kD; ++d) e.out[d] += p * v[j][d];
  }
  for (double& x : e.out) x /= l;
  e.lse = (m + std::log2(l)) * std::log(2.0);
  return e;
}

void expect_close(const PartialRow& row, const Exact& e, double tol, const std::string& what) {
  const std::vector<float> out = row.final_out();
  for (int d = 0; d < kD; ++d) EXPECT_NEAR(out[d], e.out[d], tol) << what << " O[" << d << "]";
  EXPECT_NEAR(row.st.lse(), e.lse, tol * std::max(1.0, std::abs(e.lse))) << what << " LSE";
}

std::vector<std::vector<float>> random_values(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> v(n, std::vector<float>(kD));
  for (auto& row : v)
    for (float& x : row) x = normal(rng);
  return v;
}

std::vector<int> all_keys(size_t n) {
  std::vector<int> keys(n);
  std::iota(keys.begin(), keys.end(), 0);
  return keys;
}

TEST(OnlineSoftmax, DisjointSplitsMergeToTheWhole) {
  std::mt19937_64 rng = rng_for("merge");
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 150;
    std::normal_distribution<float> normal(0.0f, trial % 2 ? 2.0f : 12.0f);
    std::vector<float> s(n);
    for (float& x : s) x = normal(rng);
    const auto v = random_values(rng, n);
    const bool conditional = trial % 3 != 0;
    const size_t block = 1 + rng() % 17;

    // Keys dealt at random into 2 or 3 parts (some possibly empty), each fed on its own.
    const int parts = 2 + trial % 2;
    std::vector<std::vector<int>> part_keys(parts);
    for (int j = 0; j < static_cast<int>(n); ++j) part_keys[rng() % parts].push_back(j);
    std::vector<PartialRow> partial(parts);
    for (int i = 0; i < parts; ++i) partial[i].feed(s, v, part_keys[i], block, conditional);

    // Merged in a random order.
    std::vector<int> order(parts);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    PartialRow merged = partial[order[0]];
    for (int i = 1; i < parts; ++i) merged.merge(partial[order[i]]);

    PartialRow whole;
    whole.feed(s, v, all_keys(n), block, conditional);

    const Exact e = exact(s, v);
    const std::string what = "trial " + std::to_string(trial) + " n=" + std::to_string(n);
    expect_close(merged, e, 2e-6, what + " merged");
    expect_close(whole, e, 2e-6, what + " whole");
    const auto a = merged.final_out(), b = whole.final_out();
    for (int d = 0; d < kD; ++d) EXPECT_NEAR(a[d], b[d], 2e-6) << what;
  }
}

TEST(OnlineSoftmax, MergeIsOrderIndependentForTwoParts) {
  std::mt19937_64 rng = rng_for("merge2");
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> s(40);
  for (float& x : s) x = normal(rng);
  const auto v = random_values(rng, s.size());
  std::vector<int> first(all_keys(17)), second;
  for (int j = 17; j < 40; ++j) second.push_back(j);
  PartialRow a, b;
  a.feed(s, v, first, 8, true);
  b.feed(s, v, second, 8, true);
  PartialRow ab = a, ba = b;
  ab.merge(b);
  ba.merge(a);
  const Exact e = exact(s, v);
  expect_close(ab, e, 2e-6, "a+b");
  expect_close(ba, e, 2e-6, "b+a");
}

TEST(OnlineSoftmax, FullyMaskedRowIsEmptyNotNaN) {
  const std::vector<float> s(70, -INFINITY);
  std::mt19937_64 rng = rng_for("masked");
  const auto v = random_values(rng, s.size());
  for (bool conditional : {true, false}) {
    PartialRow row;
    row.feed(s, v, all_keys(s.size()), 16, conditional);
    EXPECT_EQ(row.st.l, 0.0f);
    EXPECT_EQ(row.st.m, -INFINITY);
    EXPECT_EQ(row.st.base(), 0.0f);  // so exp2(-inf - base) is 0, not NaN
    EXPECT_EQ(row.st.inv_l(), 0.0f);
    for (float x : row.final_out()) EXPECT_EQ(x, 0.0f);
    EXPECT_EQ(row.st.lse(), -INFINITY);
  }
}

TEST(OnlineSoftmax, AdvanceWithMaskedBlockLeavesStateAlone) {
  SoftmaxRow st;
  EXPECT_EQ(st.advance(-INFINITY, true), 1.0f);
  EXPECT_EQ(st.m, -INFINITY);
  EXPECT_EQ(st.l, 0.0f);
  EXPECT_EQ(st.advance(3.0f, true), 0.0f);  // first real block sets the base; O (all 0) scaled by 0
  st.add(2.0f);
  EXPECT_EQ(st.advance(-INFINITY, true), 1.0f);
  EXPECT_EQ(st.advance(-INFINITY, false), 1.0f);
  EXPECT_EQ(st.m, 3.0f);
  EXPECT_EQ(st.l, 2.0f);
}

TEST(OnlineSoftmax, MergingEmptyStates) {
  SoftmaxRow a, b;
  float fa = -1, fb = -1;
  a.merge(b, &fa, &fb);
  EXPECT_EQ(fa, 0.0f);
  EXPECT_EQ(fb, 0.0f);
  EXPECT_EQ(a.l, 0.0f);
  EXPECT_EQ(a.m, -INFINITY);
  EXPECT_EQ(a.lse(), -INFINITY);
  EXPECT_FALSE(std::isnan(a.inv_l()));

  // Empty merged with non-empty, both ways: exactly the non-empty one.
  SoftmaxRow full;
  full.advance(1.5f, true);
  full.add(3.0f);
  SoftmaxRow x = SoftmaxRow{}, y = full;
  x.merge(full, &fa, &fb);
  EXPECT_EQ(fa, 0.0f);
  EXPECT_EQ(fb, 1.0f);
  EXPECT_EQ(x.m, full.m);
  EXPECT_EQ(x.l, full.l);
  y.merge(SoftmaxRow{}, &fa, &fb);
  EXPECT_EQ(fa, 1.0f);
  EXPECT_EQ(fb, 0.0f);
  EXPECT_EQ(y.m, full.m);
  EXPECT_EQ(y.l, full.l);
}

TEST(OnlineSoftmax, HugeLogitsDoNotOverflow) {
  // +-1e4 in natural units, i.e. +-14427 in log2 units: exp of either alone is inf or 0.
  const float big = 1e4f * detail::kLog2e;
  std::vector<float> s = {-big, big, big - 1.0f, -big, big - 30.0f, 0.0f, big - 3.0f, -big};
  std::mt19937_64 rng = rng_for("huge");
  const auto v = random_values(rng, s.size());
  for (bool conditional : {true, false})
    for (size_t block : {1, 3, 8}) {
      PartialRow row;
      row.feed(s, v, all_keys(s.size()), block, conditional);
      EXPECT_TRUE(std::isfinite(row.st.l));
      EXPECT_TRUE(std::isfinite(row.st.lse()));
      const Exact e = exact(s, v);
      // The LSE is ~1e4, where one fp32 ulp is ~1e-3: the check is relative.
      expect_close(row, e, 2e-6, "block " + std::to_string(block));
    }
  // All hugely negative: still a proper softmax, lse ~ -1e4.
  std::vector<float> neg = {-big, -big + 2.0f, -big + 0.5f};
  PartialRow row;
  row.feed(neg, v, all_keys(neg.size()), 2, true);
  expect_close(row, exact(neg, v), 2e-6, "all negative");
}

TEST(OnlineSoftmax, ConditionalAndAlwaysRescalingAgree) {
  std::mt19937_64 rng = rng_for("rescale");
  for (int trial = 0; trial < 100; ++trial) {
    const size_t n = 10 + rng() % 200;
    std::normal_distribution<float> normal(0.0f, 6.0f);
    std::vector<float> s(n);
    for (float& x : s) x = normal(rng);
    if (trial % 2) std::sort(s.begin(), s.end());  // the max grows in every block
    const auto v = random_values(rng, n);
    const size_t block = 1 + rng() % 9;
    PartialRow cond, always;
    cond.feed(s, v, all_keys(n), block, true);
    always.feed(s, v, all_keys(n), block, false);
    const Exact e = exact(s, v);
    const std::string what = "trial " + std::to_string(trial);
    expect_close(cond, e, 2e-6, what + " conditional");
    expect_close(always, e, 2e-6, what + " always");
    const auto a = cond.final_out(), b = always.final_out();
    for (int d = 0; d < kD; ++d) EXPECT_NEAR(a[d], b[d], 2e-6) << what;
    EXPECT_NEAR(cond.st.lse(), always.st.lse(), 2e-6 * std::max(1.0f, std::abs(always.st.lse()))) << what;
    // Always-rescale keeps the base at the running max; conditional never lets it fall more
    // than the threshold behind.
    const float max = *std::max_element(s.begin(), s.end());
    EXPECT_EQ(always.st.m, max) << what;
    EXPECT_LE(cond.st.m, max) << what;
    EXPECT_LE(max - cond.st.m, detail::kRescaleThreshold) << what;
  }
}

TEST(OnlineSoftmax, BaseKeptWhileGrowthWithinThreshold) {
  SoftmaxRow st;
  EXPECT_EQ(st.advance(0.0f, true), 0.0f);  // first block: the base becomes 0
  EXPECT_EQ(st.m, 0.0f);
  st.add(1.0f);
  // Growth measured from the base, not from the last block max.
  EXPECT_EQ(st.advance(5.0f, true), 1.0f);
  EXPECT_EQ(st.m, 0.0f);
  EXPECT_EQ(st.advance(8.0f, true), 1.0f);  // exactly the threshold: kept
  EXPECT_EQ(st.m, 0.0f);
  EXPECT_EQ(st.l, 1.0f);
  EXPECT_EQ(st.advance(-3.0f, true), 1.0f);    // smaller max: nothing moves
  const float alpha = st.advance(8.5f, true);  // past the threshold: moves
  EXPECT_EQ(st.m, 8.5f);
  EXPECT_FLOAT_EQ(alpha, std::exp2(-8.5f));
  EXPECT_FLOAT_EQ(st.l, std::exp2(-8.5f));
}

TEST(OnlineSoftmax, AlwaysRescaleMovesOnAnyGrowth) {
  SoftmaxRow st;
  EXPECT_EQ(st.advance(0.0f, false), 0.0f);
  st.add(1.0f);
  const float alpha = st.advance(0.5f, false);
  EXPECT_EQ(st.m, 0.5f);
  EXPECT_FLOAT_EQ(alpha, std::exp2(-0.5f));
  EXPECT_FLOAT_EQ(st.l, std::exp2(-0.5f));
  EXPECT_EQ(st.advance(0.25f, false), 1.0f);  // no growth: untouched
  EXPECT_EQ(st.m, 0.5f);
}

TEST(OnlineSoftmax, WeightsStayBoundedUnderConditionalRescale) {
  // With the base at most kRescaleThreshold behind the max, no weight exceeds 2^8.
  std::mt19937_64 rng = rng_for("bounded");
  std::uniform_real_distribution<float> step(0.0f, 3.0f);
  SoftmaxRow st;
  float s = 0.0f;
  for (int i = 0; i < 1000; ++i) {
    s += step(rng);
    st.advance(s, true);
    const float w = std::exp2(s - st.base());
    ASSERT_LE(w, 256.0f) << "at step " << i;
    st.add(w);
  }
  EXPECT_TRUE(std::isfinite(st.l));
}

TEST(OnlineSoftmax, NaNPropagates) {
  SoftmaxRow st;
  st.advance(1.0f, true);
  st.add(NAN);
  EXPECT_TRUE(std::isnan(st.lse()));
  EXPECT_TRUE(std::isnan(st.inv_l()));
}

}  // namespace
}  // namespace tileattn::test
