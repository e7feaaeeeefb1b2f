// validation_test.cc: bad input for every argument of forward(): a tileattn::Error naming the
// argument and its value, supported() saying the same, and nothing written anywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

namespace tileattn::test {
namespace {

// A valid problem (fp32, B=2, Lq=5, Lk=7, Hq=4, Hkv=2, D=8) that each case spoils in one way.
struct Args {
  HostTensor q, k, v, out, lse;
  TensorRef rq, rk, rv, rout, rlse;
  bool pass_lse = true;
  Options options;

  Args() {
    std::mt19937_64 rng = rng_for("validation");
    q = HostTensor::blhd(DType::kFloat32, 2, 5, 4, 8, Layout::kContiguous);
    k = HostTensor::blhd(DType::kFloat32, 2, 7, 2, 8, Layout::kContiguous);
    v = HostTensor::blhd(DType::kFloat32, 2, 7, 2, 8, Layout::kContiguous);
    out = HostTensor::blhd(DType::kFloat32, 2, 5, 4, 8, Layout::kContiguous);
    lse = HostTensor::bhl(DType::kFloat32, 2, 4, 5, LseLayout::kContiguous);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    out.poison();
    lse.poison();
    refresh();
  }
  void refresh() {
    rq = q.ref();
    rk = k.ref();
    rv = v.ref();
    rout = out.ref();
    rlse = lse.ref();
  }
  void set_device(Device d) { rq.device = rk.device = rv.device = rout.device = rlse.device = d; }
  const TensorRef* lse_arg() const { return pass_lse ? &rlse : nullptr; }
  std::vector<std::vector<std::byte>> snapshot() const {
    return {q.bytes(), k.bytes(), v.bytes(), out.bytes(), lse.bytes()};
  }
};

struct BadCase {
  std::string name;
  std::function<void(Args&)> spoil;
  std::string argument;  // Error::argument()
  std::string value;     // must appear in what()
};

void PrintTo(const BadCase& bc, std::ostream* os) { *os << bc.name; }

std::string case_name(const testing::TestParamInfo<BadCase>& info) { return info.param.name; }

class BadInput : public testing::TestWithParam<BadCase> {};

TEST_P(BadInput, ThrowsNamingArgumentAndWritesNothing) {
  const BadCase& bc = GetParam();
  Args a;
  bc.spoil(a);
  const auto before = a.snapshot();
  try {
    forward(a.rq, a.rk, a.rv, a.rout, a.lse_arg(), a.options);
    ADD_FAILURE() << "forward() accepted the bad input";
  } catch (const tileattn::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.argument(), bc.argument) << what;
    EXPECT_EQ(what.rfind(bc.argument + ": ", 0), 0u) << "what() should start with the argument: " << what;
    EXPECT_NE(what.find(bc.value), std::string::npos)
        << "what() should contain '" << bc.value << "': " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than tileattn::Error: " << e.what();
  }
  EXPECT_TRUE(a.snapshot() == before) << "memory changed although the input was rejected";
  EXPECT_EQ(a.out.count_unwritten(), a.out.numel());
  EXPECT_EQ(a.lse.count_unwritten(), a.lse.numel());

  const Support s = supported(a.rq, a.rk, a.rv, a.rout, a.lse_arg(), a.options);
  EXPECT_FALSE(s.ok);
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_NE(s.reason.find(bc.argument), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find(bc.value), std::string::npos) << s.reason;
}

// Replaces every tensor with one of head_dim d (so the views stay disjoint).
void use_head_dim(Args& a, int64_t d) {
  a.q = HostTensor::blhd(DType::kFloat32, 1, 2, 1, d, Layout::kContiguous);
  a.k = HostTensor::blhd(DType::kFloat32, 1, 3, 1, d, Layout::kContiguous);
  a.v = HostTensor::blhd(DType::kFloat32, 1, 3, 1, d, Layout::kContiguous);
  a.out = HostTensor::blhd(DType::kFloat32, 1, 2, 1, d, Layout::kContiguous);
  a.lse = HostTensor::bhl(DType::kFloat32, 1, 1, 2, LseLayout::kContiguous);
  a.out.poison();
  a.lse.poison();
  a.refresh();
}

// Makes k and v long enough (Lk = 40) that an out view of q's shape fits inside either.
void use_long_kv(Args& a) {
  std::mt19937_64 rng = rng_for("long kv");
  a.k = HostTensor::blhd(DType::kFloat32, 2, 40, 2, 8, Layout::kContiguous);
  a.v = HostTensor::blhd(DType::kFloat32, 2, 40, 2, 8, Layout::kContiguous);
  a.k.fill_normal(rng);
  a.v.fill_normal(rng);
  a.refresh();
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> c;
  // Rank.
  c.push_back({"q_rank3", [](Args& a) { a.rq.rank = 3; }, "q", "rank 3"});
  c.push_back({"q_rank0", [](Args& a) { a.rq.rank = 0; }, "q", "rank 0"});
  c.push_back({"q_rank_negative", [](Args& a) { a.rq.rank = -1; }, "q", "rank -1"});
  c.push_back({"q_rank_above_max", [](Args& a) { a.rq.rank = kMaxRank + 1; }, "q",
               "rank " + std::to_string(kMaxRank + 1)});
  c.push_back({"k_rank2", [](Args& a) { a.rk.rank = 2; }, "k", "rank 2"});
  c.push_back({"v_rank3", [](Args& a) { a.rv.rank = 3; }, "v", "rank 3"});
  c.push_back({"out_rank1", [](Args& a) { a.rout.rank = 1; }, "out", "rank 1"});
  c.push_back({"lse_rank4",
               [](Args& a) {
                 a.rlse.rank = 4;
                 a.rlse.shape[3] = 1;
               },
               "lse", "rank 4"});
  c.push_back({"lse_rank2", [](Args& a) { a.rlse.rank = 2; }, "lse", "rank 2"});
  // Shapes: each dim that must agree.
  c.push_back({"q_head_dim0", [](Args& a) { a.rq.shape[3] = 0; }, "q", "head_dim (dim 3) is 0"});
  c.push_back({"q_heads0", [](Args& a) { a.rq.shape[2] = 0; }, "q", "heads (dim 2) is 0"});
  c.push_back({"k_heads0", [](Args& a) { a.rk.shape[2] = 0; }, "k", "heads (dim 2) is 0"});
  c.push_back({"k_batch", [](Args& a) { a.rk.shape[0] = 3; }, "k", "is 3, expected 2"});
  c.push_back({"k_head_dim", [](Args& a) { a.rk.shape[3] = 9; }, "k", "is 9, expected 8"});
  c.push_back({"v_batch", [](Args& a) { a.rv.shape[0] = 1; }, "v", "is 1, expected 2"});
  c.push_back({"v_seqlen", [](Args& a) { a.rv.shape[1] = 6; }, "v", "is 6, expected 7"});
  c.push_back({"v_heads", [](Args& a) { a.rv.shape[2] = 1; }, "v", "is 1, expected 2"});
  c.push_back({"v_head_dim", [](Args& a) { a.rv.shape[3] = 4; }, "v", "is 4, expected 8"});
  c.push_back({"out_batch", [](Args& a) { a.rout.shape[0] = 1; }, "out", "is 1, expected 2"});
  c.push_back({"out_seqlen", [](Args& a) { a.rout.shape[1] = 4; }, "out", "is 4, expected 5"});
  c.push_back({"out_heads", [](Args& a) { a.rout.shape[2] = 2; }, "out", "is 2, expected 4"});
  c.push_back({"out_head_dim", [](Args& a) { a.rout.shape[3] = 7; }, "out", "is 7, expected 8"});
  c.push_back({"lse_batch", [](Args& a) { a.rlse.shape[0] = 1; }, "lse", "is 1, expected 2"});
  c.push_back({"lse_heads", [](Args& a) { a.rlse.shape[1] = 2; }, "lse", "is 2, expected 4"});
  c.push_back({"lse_seqlen", [](Args& a) { a.rlse.shape[2] = 7; }, "lse", "is 7, expected 5"});
  c.push_back({"gqa_heads_not_dividing", [](Args& a) { a.rk.shape[2] = a.rv.shape[2] = 3; }, "k", "3"});
  c.push_back({"k_negative_size", [](Args& a) { a.rk.shape[1] = -3; }, "k", "-3"});
  // Dtypes.
  c.push_back({"k_dtype", [](Args& a) { a.rk.dtype = DType::kFloat16; }, "k", "fp16"});
  c.push_back({"v_dtype", [](Args& a) { a.rv.dtype = DType::kBFloat16; }, "v", "bf16"});
  c.push_back({"out_dtype", [](Args& a) { a.rout.dtype = DType::kFloat16; }, "out", "fp16"});
  c.push_back({"fp64_forward",
               [](Args& a) { a.rq.dtype = a.rk.dtype = a.rv.dtype = a.rout.dtype = DType::kFloat64; }, "q",
               "fp64"});
  c.push_back({"lse_dtype_fp16", [](Args& a) { a.rlse.dtype = DType::kFloat16; }, "lse", "fp16"});
  c.push_back({"lse_dtype_fp64", [](Args& a) { a.rlse.dtype = DType::kFloat64; }, "lse", "fp64"});
  // Devices.
  c.push_back({"k_on_other_device", [](Args& a) { a.rk.device = Device::cuda(0); }, "k", "cuda:0"});
  c.push_back({"v_on_other_device", [](Args& a) { a.rv.device = Device::cuda(1); }, "v", "cuda:1"});
  c.push_back({"out_on_other_device", [](Args& a) { a.rout.device = Device::cuda(0); }, "out", "cuda:0"});
  c.push_back({"lse_on_other_device", [](Args& a) { a.rlse.device = Device::cuda(0); }, "lse", "cuda:0"});
  // All on a CUDA device this build or machine does not have (no CUDA build: "no CUDA kernels").
  c.push_back({"cuda_device_absent", [](Args& a) { a.set_device(Device::cuda(64)); }, "q", "cuda:64"});
  c.push_back({"cuda_device_negative", [](Args& a) { a.set_device(Device::cuda(-1)); }, "q", "-1"});
  // Strides and memory.
  c.push_back({"q_negative_stride", [](Args& a) { a.rq.stride[1] = -32; }, "q", "-32"});
  c.push_back({"k_negative_stride", [](Args& a) { a.rk.stride[3] = -1; }, "k", "-1"});
  c.push_back({"out_negative_stride", [](Args& a) { a.rout.stride[0] = -160; }, "out", "-160"});
  c.push_back({"lse_negative_stride", [](Args& a) { a.rlse.stride[2] = -1; }, "lse", "-1"});
  c.push_back({"out_self_overlapping", [](Args& a) { a.rout.stride[2] = 0; }, "out", "overlap"});
  c.push_back({"out_rows_overlapping", [](Args& a) { a.rout.stride[1] = 8; }, "out", "overlap"});
  c.push_back({"lse_self_overlapping", [](Args& a) { a.rlse.stride[1] = 1; }, "lse", "overlap"});
  c.push_back({"lse_overlaps_out", [](Args& a) { a.rlse.data = a.rout.data; }, "lse", "out"});
  c.push_back(
      {"lse_inside_out", [](Args& a) { a.rlse.data = static_cast<float*>(a.rout.data) + 50; }, "lse", "out"});
  c.push_back({"out_aliases_q", [](Args& a) { a.rout.data = a.rq.data; }, "out", "q"});
  c.push_back({"out_aliases_k",
               [](Args& a) {
                 use_long_kv(a);
                 a.rout.data = a.rk.data;
               },
               "out", "k"});
  c.push_back({"out_aliases_v",
               [](Args& a) {
                 use_long_kv(a);
                 a.rout.data = static_cast<float*>(a.rv.data) + 3;
               },
               "out", "v"});
  c.push_back({"lse_aliases_q", [](Args& a) { a.rlse.data = a.rq.data; }, "lse", "q"});
  c.push_back({"q_null", [](Args& a) { a.rq.data = nullptr; }, "q", "null"});
  c.push_back({"k_null", [](Args& a) { a.rk.data = nullptr; }, "k", "null"});
  c.push_back({"v_null", [](Args& a) { a.rv.data = nullptr; }, "v", "null"});
  c.push_back({"out_null", [](Args& a) { a.rout.data = nullptr; }, "out", "null"});
  c.push_back({"lse_null", [](Args& a) { a.rlse.data = nullptr; }, "lse", "null"});
  // Options.
  c.push_back({"scale_nan", [](Args& a) { a.options.scale = kNaN; }, "options.scale", "nan"});
  c.push_back({"scale_inf", [](Args& a) { a.options.scale = kInf; }, "options.scale", "inf"});
  c.push_back({"scale_minus_inf", [](Args& a) { a.options.scale = -kInf; }, "options.scale", "-inf"});
  c.push_back({"softcap_negative", [](Args& a) { a.options.softcap = -1.5f; }, "options.softcap", "-1.5"});
  c.push_back({"softcap_nan", [](Args& a) { a.options.softcap = kNaN; }, "options.softcap", "nan"});
  c.push_back({"softcap_inf", [](Args& a) { a.options.softcap = kInf; }, "options.softcap", "inf"});
  c.push_back(
      {"window_left_below_minus1", [](Args& a) { a.options.window_left = -2; }, "options.window_left", "-2"});
  c.push_back({"window_right_below_minus1", [](Args& a) { a.options.window_right = -7; },
               "options.window_right", "-7"});
  c.push_back({"causal_with_window_right",
               [](Args& a) {
                 a.options.causal = true;
                 a.options.window_right = 3;
               },
               "options.window_right", "3"});
  c.push_back(
      {"num_threads_negative", [](Args& a) { a.options.num_threads = -1; }, "options.num_threads", "-1"});
  c.push_back({"k_stride_past_int64", [](Args& a) { a.rk.stride[0] = int64_t{1} << 62; }, "k",
               std::to_string(int64_t{1} << 62)});
  c.push_back({"v_shape_past_2_60",
               [](Args& a) {
                 a.rv.shape[1] = int64_t{1} << 58;
                 a.rv.stride[1] = 0;
               },
               "v", "2^60"});
  c.push_back({"num_threads_absurd", [](Args& a) { a.options.num_threads = 200000; }, "options.num_threads",
               "200000"});
  c.push_back({"kernel_sm80_on_cpu", [](Args& a) { a.options.kernel = Kernel::kCudaSm80; }, "options.kernel",
               "sm80"});
  c.push_back({"kernel_sm90_on_cpu", [](Args& a) { a.options.kernel = Kernel::kCudaSm90; }, "options.kernel",
               "sm90"});
  c.push_back({"head_dim_over_cpu_limit", [](Args& a) { use_head_dim(a, 513); }, "q", "513"});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Forward, BadInput, testing::ValuesIn(bad_cases()), case_name);

TEST(Permuted, RepeatedIndexIsRejected) {
  Args a;
  try {
    (void)a.rq.permuted({1, 1, 2, 3});
    ADD_FAILURE() << "permuted() accepted a repeated index";
  } catch (const tileattn::Error& e) {
    EXPECT_EQ(e.argument(), "perm");
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
}

TEST(BadRank, AboveMaxRankIsReportedWithoutReadingPastTheShape) {
  // TensorRef holds kMaxRank = 4 sizes; a message that lists a fifth read past the array.
  Args a;
  a.rq.rank = kMaxRank + 1;
  try {
    forward(a.rq, a.rk, a.rv, a.rout, &a.rlse);
    ADD_FAILURE() << "forward() accepted rank 5";
  } catch (const tileattn::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("[2, 5, 4, 8, "), std::string::npos) << "shape printed with 5 entries: " << what;
  }
}

TEST(Supported, GoodInputRunsOnTheCpuKernel) {
  Args a;
  for (bool with_lse : {true, false}) {
    a.pass_lse = with_lse;
    for (Kernel kernel : {Kernel::kAuto, Kernel::kCpuTiled}) {
      a.options.kernel = kernel;
      const Support s = supported(a.rq, a.rk, a.rv, a.rout, a.lse_arg(), a.options);
      EXPECT_TRUE(s.ok) << s.reason;
      EXPECT_EQ(s.kernel, Kernel::kCpuTiled);
      EXPECT_TRUE(s.reason.empty()) << s.reason;
    }
  }
  // The CPU head-dim limit itself is fine.
  use_head_dim(a, 512);
  EXPECT_TRUE(supported(a.rq, a.rk, a.rv, a.rout, &a.rlse).ok);
}

TEST(Supported, WritesNothing) {
  Args a;
  const auto before = a.snapshot();
  EXPECT_TRUE(supported(a.rq, a.rk, a.rv, a.rout, &a.rlse).ok);
  EXPECT_TRUE(a.snapshot() == before);
}

TEST(Forward, WithoutLseWritesOutOnly) {
  Args a;
  forward(a.rq, a.rk, a.rv, a.rout, nullptr);
  EXPECT_EQ(a.out.count_unwritten(), 0);
  EXPECT_EQ(a.out.count_gaps_changed(), 0);
  EXPECT_EQ(a.lse.count_unwritten(), a.lse.numel());
}

TEST(Forward, CausalWithWindowRightZeroIsAccepted) {
  Args a;
  a.options.causal = true;
  a.options.window_right = 0;
  a.options.window_left = 3;
  EXPECT_NO_THROW(forward(a.rq, a.rk, a.rv, a.rout, &a.rlse, a.options));
}

TEST(Reference, RejectsCudaTensorsAndAcceptsFp64) {
  Args a;
  a.set_device(Device::cuda(0));
  try {
    reference(a.rq, a.rk, a.rv, a.rout, &a.rlse);
    ADD_FAILURE() << "reference() accepted CUDA tensors";
  } catch (const tileattn::Error& e) {
    EXPECT_EQ(e.argument(), "q");
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  // fp64 in and out is what the oracle is for.
  Problem p;
  p.dtype = DType::kFloat64;
  p.seqlen_q = 3;
  p.seqlen_k = 4;
  Case c(p);
  EXPECT_NO_THROW(c.run_oracle());
  EXPECT_EQ(c.ref_out.count_unwritten(), 0);
}

TEST(Reference, RowRangeIsChecked) {
  Args a;
  try {
    reference_rows(a.rq, a.rk, a.rv, a.rout, &a.rlse, {}, 3, 2);
    ADD_FAILURE() << "reference_rows() accepted row_begin > row_end";
  } catch (const tileattn::Error& e) {
    EXPECT_EQ(e.argument(), "row_begin");
    EXPECT_NE(std::string(e.what()).find("3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.out.count_unwritten(), a.out.numel());
}

TEST(Reference, RowRangeWritesOnlyThoseRows) {
  Args a;
  reference_rows(a.rq, a.rk, a.rv, a.rout, &a.rlse, {}, 1, 3);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t h = 0; h < 4; ++h) {
        const bool inside = i >= 1 && i < 3;
        EXPECT_EQ(std::isnan(a.lse.get({b, h, i})), !inside) << "row " << i;
        EXPECT_EQ(std::isnan(a.out.get({b, i, h, 0})), !inside) << "row " << i;
      }
}

TEST(Eager, RejectsLikeForward) {
  Args a;
  a.rq.dtype = a.rk.dtype = a.rv.dtype = a.rout.dtype = DType::kFloat64;
  try {
    eager(a.rq, a.rk, a.rv, a.rout, &a.rlse);
    ADD_FAILURE() << "eager() accepted fp64";
  } catch (const tileattn::Error& e) {
    EXPECT_EQ(e.argument(), "q");
  }
  Args b;
  b.options.softcap = -2.0f;
  EXPECT_THROW(eager(b.rq, b.rk, b.rv, b.rout, &b.rlse, b.options), tileattn::Error);
  EXPECT_EQ(b.out.count_unwritten(), b.out.numel());
}

}  // namespace
}  // namespace tileattn::test
