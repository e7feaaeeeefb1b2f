// eager_test.cc: the eager baseline materializes S and P (and says how many bytes they took),
// writes every output element, and its error against the oracle is what its dtype predicts.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace tileattn::test {
namespace {

class EagerBaseline : public testing::TestWithParam<DType> {};

TEST_P(EagerBaseline, ReportsTheBytesOfSAndP) {
  Problem p;
  p.dtype = GetParam();
  p.batch = 2;
  p.seqlen_q = 33;
  p.seqlen_k = 70;
  p.heads_q = 6;
  p.heads_kv = 2;
  p.head_dim = 24;
  Case c(p);
  EagerStats stats;
  stats.extra_bytes = -1;
  const Result r = run_eager(c, &stats);
  EXPECT_EQ(stats.extra_bytes, 2 * 2 * 6 * 33 * 70 * static_cast<int64_t>(dtype_size(p.dtype)));
  expect_written(r, "eager");
}

TEST_P(EagerBaseline, ErrorIsWhatItsDtypePredicts) {
  // Logits ~ N(0, 1) (|S| < 6 here): rounding S and P to the dtype costs at most ~6 units of the
  // dtype's epsilon in the LSE and a few in O. fp32 keeps fp32 accuracy.
  const DType dtype = GetParam();
  const double eps = dtype == DType::kFloat32   ? std::ldexp(1.0, -24)
                     : dtype == DType::kFloat16 ? std::ldexp(1.0, -11)
                                                : std::ldexp(1.0, -8);
  for (bool causal : {false, true}) {
    Problem p;
    p.dtype = dtype;
    p.seqlen_q = 150;
    p.seqlen_k = 130;
    p.heads_q = 2;
    p.head_dim = 64;
    p.heads_kv = 1;
    p.options.causal = causal;
    p.out_layout = Layout::kPadded;
    Case c(p);
    c.run_oracle();
    const Result r = run_eager(c);
    expect_written(r, "eager");
    expect_empty_rows_exact(r, c);
    const Errors e = measure(r, c);
    EXPECT_EQ(e.mismatches, 0) << e.first_mismatch;
    EXPECT_LE(e.out, (dtype == DType::kFloat32 ? 64 : 8) * eps) << "eager O error";
    EXPECT_LE(e.lse, (dtype == DType::kFloat32 ? 64 : 8) * eps) << "eager LSE error";
    EXPECT_GT(e.out, 0.0) << "eager should not be exact: it is the rounding baseline";
    RecordProperty(causal ? "causal_err_out" : "err_out", testing::PrintToString(e.out));
  }
}

TEST_P(EagerBaseline, WithoutLseAndWithNoQueries) {
  Problem p;
  p.dtype = GetParam();
  p.seqlen_q = 0;
  p.seqlen_k = 5;
  Case c(p);
  EagerStats stats;
  const Result r = run_eager(c, &stats);
  EXPECT_EQ(stats.extra_bytes, 0);
  EXPECT_EQ(r.out.count_gaps_changed(), 0);

  p.seqlen_q = 4;
  Case d(p);
  HostTensor out = HostTensor::blhd(p.dtype, 1, 4, 1, p.head_dim, Layout::kStrided);
  out.poison();
  eager(d.q.ref(), d.k.ref(), d.v.ref(), out.ref(), nullptr);
  EXPECT_EQ(out.count_unwritten(), 0);
  EXPECT_EQ(out.count_gaps_changed(), 0);
}

INSTANTIATE_TEST_SUITE_P(Eager, EagerBaseline,
                         testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace tileattn::test
