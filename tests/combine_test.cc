// combine_test.cc: combine() against the merge computed in double, empty (-inf) splits that hold
// garbage, NaN propagation, a real attention problem cut into key ranges and merged back, and
// bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Partials {
  HostTensor o, lse;  // [S, B, L, H, D] fp32 (as a rank-5 view), [S, B, H, L] fp32
  int64_t S, B, L, H, D;
};

// Rank-5 storage: HostTensor holds rank <= 4 views, so the partial O is [S * B, L, H, D] storage
// viewed as [S, B, L, H, D].
TensorRef rank5(const HostTensor& t, int64_t S, int64_t B) {
  TensorRef r = t.ref();
  r.rank = 5;
  for (int d = 4; d >= 2; --d) r.shape[d] = r.shape[d - 1], r.stride[d] = r.stride[d - 1];
  r.shape[0] = S, r.shape[1] = B;
  r.stride[1] = r.stride[0], r.stride[0] *= B;
  return r;
}

Partials random_partials(int64_t S, int64_t B, int64_t L, int64_t H, int64_t D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Partials p{HostTensor::contiguous(DType::kFloat32, {S * B, L, H, D}),
             HostTensor::contiguous(DType::kFloat32, {S, B, H, L}),
             S,
             B,
             L,
             H,
             D};
  p.o.fill_normal(rng);
  p.lse.fill_normal(rng, 4.0);
  // Row (b=0, l=1, h=0): splits 1 and 3 empty, their outputs garbage (NaN). Row (b=1, l=0, h=*):
  // every split empty. Row (b=0, l=2, h=1): split 0's LSE is NaN, which must propagate.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // (Each only where the shape has that row and split.)
  for (int64_t s : {1, 3}) {
    if (s >= S || L < 2) continue;
    p.lse.set({s, 0, 0, 1}, -kInf);
    for (int64_t d = 0; d < D; ++d) p.o.set({s * B + 0, 1, 0, d}, nan);
  }
  for (int64_t s = 0; s < S && B > 1; ++s)
    for (int64_t h = 0; h < H; ++h) p.lse.set({s, 1, h, 0}, -kInf);
  if (H > 1 && L > 2) p.lse.set({0, 0, 1, 2}, nan);
  return p;
}

// The merge in double, for row (b, l, h): (out[D], lse).
std::pair<std::vector<double>, double> expected(const Partials& p, int64_t b, int64_t l, int64_t h) {
  double m = -kInf;
  bool nan = false;
  for (int64_t s = 0; s < p.S; ++s) {
    const double x = p.lse.get({s, b, h, l});
    if (std::isnan(x))
      nan = true;
    else
      m = std::max(m, x);
  }
  std::vector<double> out(p.D, 0.0);
  if (nan) return {std::vector<double>(p.D, std::numeric_limits<double>::quiet_NaN()), std::nan("")};
  if (m == -kInf) return {out, -kInf};
  double sum = 0;
  for (int64_t s = 0; s < p.S; ++s) sum += std::exp(p.lse.get({s, b, h, l}) - m);
  for (int64_t s = 0; s < p.S; ++s) {
    const double x = p.lse.get({s, b, h, l});
    if (x == -kInf) continue;
    for (int64_t d = 0; d < p.D; ++d) out[d] += std::exp(x - m) / sum * p.o.get({s * p.B + b, l, h, d});
  }
  return {out, m + std::log(sum)};
}

void expect_merged(const Partials& p, const HostTensor& out, const HostTensor& lse, double tol) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t l = 0; l < p.L; ++l)
      for (int64_t h = 0; h < p.H; ++h) {
        const auto [o, x] = expected(p, b, l, h);
        const double got = lse.get({b, h, l, 0});
        if (std::isnan(x))
          EXPECT_TRUE(std::isnan(got)) << b << "," << l << "," << h;
        else if (std::isinf(x))
          EXPECT_EQ(got, x) << b << "," << l << "," << h;
        else
          EXPECT_NEAR(got, x, 1e-5 * std::max(1.0, std::abs(x))) << b << "," << l << "," << h;
        for (int64_t d = 0; d < p.D; ++d) {
          const double v = out.get({b, l, h, d});
          if (std::isnan(o[d]))
            EXPECT_TRUE(std::isnan(v));
          else
            EXPECT_NEAR(v, o[d], tol) << "out[" << b << "," << l << "," << h << "," << d << "]";
        }
      }
}

TEST(Combine, MatchesTheMergeInDouble) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const Partials p = random_partials(5, 2, 7, 3, 16, 11);
    HostTensor out = HostTensor::blhd(dtype, 2, 7, 3, 16, Layout::kPadded);
    HostTensor lse = HostTensor::bhl(DType::kFloat32, 2, 3, 7, LseLayout::kBLH);
    out.poison();
    lse.poison();
    const TensorRef lse_ref = lse.ref();
    combine(rank5(p.o, p.S, p.B), p.lse.ref(), out.ref(), &lse_ref);
    EXPECT_EQ(out.count_unwritten(), 0);
    EXPECT_EQ(out.count_gaps_changed(), 0);
    EXPECT_EQ(lse.count_gaps_changed(), 0);
    const double tol = dtype == DType::kFloat32 ? 1e-5 : dtype == DType::kFloat16 ? 4e-3 : 3e-2;
    expect_merged(p, out, lse, tol);
  }
}

TEST(Combine, OneSplitIsItself) {
  const Partials p = random_partials(1, 1, 4, 2, 8, 3);
  HostTensor out = HostTensor::contiguous(DType::kFloat32, {1, 4, 2, 8});
  out.poison();
  combine(rank5(p.o, 1, 1), p.lse.ref(), out.ref(), nullptr);
  out.for_each([&](const Index& i) {
    if (std::isfinite(p.lse.get({0, i[0], i[2], i[1]}))) {
      EXPECT_FLOAT_EQ(out.get(i), p.o.get(i));
    }
  });
}

// A problem's keys cut into three ranges: forward on each range (with its LSE) merged by
// combine() is forward on all keys.
TEST(Combine, KeyRangesMergeToTheWhole) {
  Problem prob;
  prob.batch = 2, prob.seqlen_q = 33, prob.seqlen_k = 300, prob.heads_q = 4, prob.heads_kv = 2,
  prob.head_dim = 24;
  Case c(prob, 5);
  const Result whole = run_forward(c);
  const int64_t cuts[] = {0, 70, 71, 300};  // one range of a single key
  const int64_t S = 3, B = 2, L = 33, H = 4, D = 24;
  HostTensor o_part = HostTensor::contiguous(DType::kFloat32, {S * B, L, H, D});
  HostTensor lse_part = HostTensor::contiguous(DType::kFloat32, {S, B, H, L});
  for (int64_t s = 0; s < S; ++s) {
    const int64_t k0 = cuts[s], n = cuts[s + 1] - k0;
    auto keys = [&](const HostTensor& t) {
      TensorRef r = t.ref();
      r.data = static_cast<char*>(r.data) + k0 * r.stride[1] * static_cast<int64_t>(dtype_size(r.dtype));
      r.shape[1] = n;
      return r;
    };
    TensorRef o = o_part.ref();
    o.data = static_cast<float*>(o.data) + s * B * L * H * D;
    o.shape[0] = B;
    TensorRef l = lse_part.ref();
    l.data = static_cast<float*>(l.data) + s * B * H * L;
    l.rank = 3;
    for (int d = 0; d < 3; ++d) l.shape[d] = l.shape[d + 1], l.stride[d] = l.stride[d + 1];
    forward(c.q.ref(), keys(c.k), keys(c.v), o, &l);
  }
  HostTensor out = HostTensor::contiguous(DType::kFloat32, {B, L, H, D});
  HostTensor lse = HostTensor::contiguous(DType::kFloat32, {B, H, L});
  const TensorRef lse_ref = lse.ref();
  combine(rank5(o_part, S, B), lse_part.ref(), out.ref(), &lse_ref);
  out.for_each([&](const Index& i) { EXPECT_NEAR(out.get(i), whole.out.get(i), 2e-6); });
  lse.for_each([&](const Index& i) { EXPECT_NEAR(lse.get(i), whole.lse.get(i), 2e-6); });
}

TEST(Combine, BadArgumentsNameThemselvesAndWriteNothing) {
  const Partials p = random_partials(3, 1, 4, 2, 8, 9);
  HostTensor out = HostTensor::contiguous(DType::kFloat32, {1, 4, 2, 8});
  HostTensor lse = HostTensor::contiguous(DType::kFloat32, {1, 2, 4});
  out.poison();
  lse.poison();
  const TensorRef o5 = rank5(p.o, 3, 1), lp = p.lse.ref(), oref = out.ref(), lref = lse.ref();
  auto expect_error = [&](const TensorRef& a, const TensorRef& b, const TensorRef& c, const TensorRef* d,
                          const std::string& argument, const std::string& text) {
    try {
      combine(a, b, c, d);
      ADD_FAILURE() << "accepted: " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_EQ(out.count_unwritten(), out.numel());
    EXPECT_EQ(lse.count_unwritten(), lse.numel());
  };
  expect_error(p.o.ref(), lp, oref, &lref, "out_partial", "rank 4");
  TensorRef bad = lp;
  bad.shape[2] = 3;
  expect_error(o5, bad, oref, &lref, "lse_partial", "heads (dim 2) is 3");
  bad = oref;
  bad.dtype = DType::kFloat64;
  expect_error(o5, lp, bad, &lref, "out", "dtype fp64");
  bad = lp;
  bad.dtype = DType::kBFloat16;
  expect_error(o5, bad, oref, &lref, "lse_partial", "dtype bf16");
  bad = oref;
  bad.device = Device::cuda(0);
  expect_error(o5, lp, bad, &lref, "out", "is on cuda:0");
  TensorRef zero = o5;
  zero.shape[0] = 0;
  expect_error(zero, lp, oref, &lref, "out_partial", "splits (dim 0) is 0");
  TensorRef alias = oref;
  alias.data = p.o.ref().data;
  expect_error(o5, lp, alias, &lref, "out", "overlaps out_partial");
}

}  // namespace
}  // namespace tileattn::test
