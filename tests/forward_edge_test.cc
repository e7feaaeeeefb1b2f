// forward_edge_test.cc: forward() at the edges: NaN propagation (only where the math puts it),
// empty rows, empty problems, huge logits, and the two rescale policies.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "test_util.h"

namespace tileattn::test {
namespace {

// Every element of O row (b, i, h) is NaN, or none is.
bool out_row_all_nan(const HostTensor& out, int64_t b, int64_t i, int64_t h) {
  for (int64_t d = 0; d < out.dim(3); ++d)
    if (!std::isnan(out.get({b, i, h, d}))) return false;
  return true;
}
bool out_row_any_nan(const HostTensor& out, int64_t b, int64_t i, int64_t h) {
  for (int64_t d = 0; d < out.dim(3); ++d)
    if (std::isnan(out.get({b, i, h, d}))) return true;
  return false;
}

// The rows in [0, n) where pred fails, as compact ranges ("64-99, 120"); empty when none.
std::string failing_rows(int64_t n, const std::function<bool(int64_t)>& pred) {
  std::ostringstream out;
  const char* sep = "";
  for (int64_t i = 0; i < n;) {
    if (pred(i)) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j + 1 < n && !pred(j + 1)) ++j;
    out << sep << i;
    if (j > i) out << "-" << j;
    sep = ", ";
    i = j + 1;
  }
  return out.str();
}

// Runs forward and the oracle on a case whose inputs hold a NaN; checks every row against the
// oracle NaN-for-NaN (Errors::mismatches) and the finite rows within tolerance. Returns the
// run for the caller's own checks.
Result check_nan_case(Case& c) {
  c.run_oracle();
  const Result r = run_forward(c);
  expect_written(r, "forward");
  const Errors e = measure(r, c);
  EXPECT_EQ(e.mismatches, 0) << e.first_mismatch;
  EXPECT_LE(e.out, 1e-5);
  expect_empty_rows_exact(r, c);
  return r;
}

Problem nan_problem(int64_t lq, int64_t lk, bool causal) {
  Problem p;
  p.seqlen_q = lq;
  p.seqlen_k = lk;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.head_dim = 24;
  p.options.causal = causal;
  return p;
}

TEST(NaN, InQueryRowStaysInThatRow) {
  Case c(nan_problem(150, 130, false));
  c.q.set({0, 70, 1, 5}, NAN);  // one element of query row 70, head 1
  const Result r = check_nan_case(c);
  EXPECT_TRUE(out_row_all_nan(r.out, 0, 70, 1));
  for (int64_t h = 0; h < 2; ++h)
    EXPECT_EQ(
        failing_rows(150, [&](int64_t i) { return (i == 70 && h == 1) || !out_row_any_nan(r.out, 0, i, h); }),
        "")
        << "head " << h << ": rows with NaN in O that should have none";
}

TEST(NaN, InVisibleKeyReachesRowsThatSeeIt) {
  // Causal, Lq = Lk = 150: key 100 is seen by rows 100..149 only.
  Case c(nan_problem(150, 150, true));
  c.k.set({0, 100, 0, 3}, NAN);
  const Result r = check_nan_case(c);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(failing_rows(150, [&](int64_t i) { return out_row_all_nan(r.out, 0, i, h) == (i >= 100); }), "")
        << "head " << h << ": rows whose O is wrongly NaN or not NaN (rows 100.. see the NaN key)";
    EXPECT_EQ(failing_rows(150,
                           [&](int64_t i) {
                             return std::isnan(r.lse.get({0, h, i})) == (i >= 100);
                           }),
              "")
        << "head " << h << ": rows whose LSE is wrongly NaN or not NaN";
  }
}

TEST(NaN, InVisibleValueReachesRowsThatSeeIt) {
  // Causal, Lq = Lk = 150: value 100 reaches rows 100..149; rows 64..99 share its key block.
  Case c(nan_problem(150, 150, true));
  c.v.set({0, 100, 0, 7}, NAN);
  const Result r = check_nan_case(c);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(failing_rows(150, [&](int64_t i) { return out_row_any_nan(r.out, 0, i, h) == (i >= 100); }), "")
        << "head " << h << ": rows whose O is wrongly NaN or not NaN (rows 100.. see the NaN value)";
    EXPECT_EQ(failing_rows(150,
                           [&](int64_t i) {
                             return !std::isnan(r.lse.get({0, h, i}));
                           }),
              "")
        << "head " << h << ": rows with a NaN LSE (a NaN value must not touch the LSE)";
  }
}

TEST(NaN, InMaskedKeyOrValueDoesNotLeak) {
  // Window (0, 0) on Lq = Lk = 100: row i sees key i only. NaN in key 30 and value 31 must
  // reach rows 30 and 31 and nothing else, though the whole tile computes with them.
  Problem p = nan_problem(100, 100, false);
  p.options.window_left = 0;
  p.options.window_right = 0;
  Case c(p);
  c.k.set({0, 30, 0, 0}, NAN);
  c.v.set({0, 31, 0, 0}, NAN);
  const Result r = check_nan_case(c);
  EXPECT_EQ(
      failing_rows(100, [&](int64_t i) { return out_row_any_nan(r.out, 0, i, 0) == (i == 30 || i == 31); }),
      "")
      << "rows whose O is wrongly NaN or not NaN (only rows 30 and 31 see a NaN)";
}

TEST(NaN, EmptyRowsStayZeroNextToNaNValues) {
  // Causal, Lq = 80 > Lk = 64: rows 0..15 see no key and must be O = 0, LSE = -inf even though
  // every value row holds a NaN that the other rows of their tile do see.
  Case c(nan_problem(80, 64, true));
  c.v.set({0, 0, 0, 0}, NAN);
  const Result r = check_nan_case(c);
  for (int64_t h = 0; h < 2; ++h)
    EXPECT_EQ(failing_rows(16, [&](int64_t i) { return !out_row_any_nan(r.out, 0, i, h); }), "")
        << "head " << h << ": empty rows (0-15) with NaN in O";
}

TEST(NaN, EmptyRowsStayZeroNextToNaNKeys) {
  Case c(nan_problem(80, 64, true));
  c.k.set({0, 0, 0, 0}, NAN);
  check_nan_case(c);
}

TEST(EmptyRows, ExactZeroAndMinusInfinity) {
  // Window (2, 0) with Lq > Lk, every dtype and a strided output.
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Problem p = nan_problem(140, 60, false);
    p.dtype = dtype;
    p.options.window_left = 2;
    p.options.window_right = 0;
    p.out_layout = Layout::kStrided;
    Case c(p);
    c.run_oracle();
    const Result r = run_forward(c);
    expect_written(r, dtype_name(dtype));
    expect_empty_rows_exact(r, c);
    EXPECT_EQ(visible_keys(p, 79), 0);
    EXPECT_EQ(visible_keys(p, 80), 1);
  }
}

TEST(EmptyProblems, NoKeysGivesZeroAndMinusInfinity) {
  Problem p = nan_problem(70, 0, false);
  Case c(p);
  c.run_oracle();
  const Result r = run_forward(c);
  expect_written(r, "Lk = 0");
  expect_empty_rows_exact(r, c);
}

TEST(EmptyProblems, NoQueriesWritesNothing) {
  for (auto [b, lq] : {std::pair<int64_t, int64_t>{1, 0}, {0, 5}}) {
    Problem p = nan_problem(lq, 9, false);
    p.batch = b;
    Case c(p);
    const Result r = run_forward(c);
    EXPECT_EQ(r.out.count_gaps_changed(), 0);
    EXPECT_EQ(r.lse.count_gaps_changed(), 0);
  }
}

TEST(Extremes, LogitsOfTenThousandStayFinite) {
  // scale 1e4 makes logits of order +-1e4: exp() of them alone over- or underflows.
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (bool causal : {false, true}) {
      Problem p = nan_problem(96, 200, causal);
      p.dtype = dtype;
      p.head_dim = 16;
      p.options.scale = 1e4f;
      Case c(p);
      c.run_oracle();
      const Result r = run_forward(c);
      expect_written(r, "forward");
      const Errors e = measure(r, c);
      EXPECT_EQ(e.mismatches, 0) << e.first_mismatch;
      const Result base = run_eager(c);
      const Errors b = measure(base, c);
      // With logits this far apart the softmax is one-hot or nearly so; O errors are the
      // dtype's rounding of V, LSE errors fp32 rounding at magnitude ~1e5.
      const Atol atol = atol_for(dtype);
      EXPECT_LE(e.out, 2 * b.out + atol.out);
      EXPECT_LE(e.lse, 2 * b.lse + 1e-6 * 1e5);
    }
  }
}

// A scale of 0 (every visible key weighs the same) and a negative one (the softmax of -S) are
// legal: the bf16 path on AMX scales S after its GEMM and must not turn a masked -inf into NaN
// (-inf x 0) or +inf, nor take a column's maximum for its minimum. Off the tile grid, causal and
// windowed, D not a power of two.
TEST(Extremes, ZeroAndNegativeScales) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (float scale : {0.0f, -0.125f})
      for (int window : {-1, 40}) {
        Problem p = nan_problem(300, 300, window < 0);
        p.dtype = dtype;
        p.head_dim = 48;
        if (window >= 0) p.options.window_left = window, p.options.window_right = 0;
        p.options.scale = scale;
        Case c(p);
        c.run_oracle();
        const Result r = run_forward(c);
        expect_written(r, "forward");
        const Errors e = measure(r, c);
        EXPECT_EQ(e.mismatches, 0) << e.first_mismatch << " scale " << scale;
        const Errors b = measure(run_eager(c), c);
        const Atol atol = atol_for(dtype);
        EXPECT_LE(e.out, 2 * b.out + atol.out) << "scale " << scale;
        EXPECT_LE(e.lse, 2 * b.lse + atol.lse) << "scale " << scale;
      }
}

TEST(Extremes, ConditionalAndAlwaysRescaleAgree) {
  // Keys sorted by their dot with q grow the row max block after block.
  Problem p = nan_problem(64, 512, false);
  p.heads_q = p.heads_kv = 1;
  p.input_stddev = 3.0;
  Case c(p);
  // Make key j's logit grow with j: k_j = k_j + (j / 16) * q_0 direction.
  for (int64_t j = 0; j < 512; ++j)
    for (int64_t d = 0; d < p.head_dim; ++d)
      c.k.set({0, j, 0, d},
              c.k.get({0, j, 0, d}) + 0.05 * static_cast<double>(j) * c.q.get({0, 0, 0, d}) / 8.0);
  c.run_oracle();
  Options cond = p.options, always = p.options;
  cond.rescale = Rescale::kConditional;
  always.rescale = Rescale::kAlways;
  const Result a = run_forward(c, cond), b = run_forward(c, always);
  const Errors ea = measure(a, c), eb = measure(b, c);
  EXPECT_EQ(ea.mismatches + eb.mismatches, 0);
  EXPECT_LE(ea.out, 1e-5);
  EXPECT_LE(eb.out, 1e-5);
  EXPECT_LE(ea.lse, 1e-5 * 100);
  EXPECT_LE(eb.lse, 1e-5 * 100);
  double diff = 0;
  a.out.for_each([&](const Index& idx) { diff = std::max(diff, std::abs(a.out.get(idx) - b.out.get(idx))); });
  EXPECT_LE(diff, 1e-5);
}

}  // namespace
}  // namespace tileattn::test

namespace tileattn::test {
namespace {

// A window wider than every key is no window: it must give exactly the unbounded result (the
// mask arithmetic once overflowed int64 for such values, in forward and oracle alike).
TEST(Extremes, WindowsPastEveryKeyAreUnbounded) {
  Problem p = nan_problem(70, 70, false);
  p.options.window_left = 0;
  p.options.window_right = -1;
  Case c(p);
  const Result unbounded = run_forward(c);
  for (int64_t right : {int64_t{141}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    Options options = p.options;
    options.window_right = right;
    const Result wide = run_forward(c, options);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        ASSERT_EQ(wide.lse.get({0, h, i}), unbounded.lse.get({0, h, i})) << "right " << right << " row " << i;
        for (int64_t d = 0; d < p.head_dim; ++d)
          ASSERT_EQ(wide.out.get({0, i, h, d}), unbounded.out.get({0, i, h, d})) << "right " << right;
      }
  }
  Options options = p.options;
  options.window_left = std::numeric_limits<int64_t>::max() - 1;  // and a left edge past key 0
  options.window_right = 0;
  Options causal = p.options;
  causal.window_left = -1;
  causal.causal = true;
  const Result wide_left = run_forward(c, options), plain_causal = run_forward(c, causal);
  for (int64_t i = 0; i < p.seqlen_q; ++i)
    ASSERT_EQ(wide_left.lse.get({0, 0, i}), plain_causal.lse.get({0, 0, i}));
}

}  // namespace
}  // namespace tileattn::test
