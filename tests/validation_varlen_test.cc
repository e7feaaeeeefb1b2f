// validation_varlen_test.cc: bad varlen and split-KV arguments: an Error naming the argument and
// the value, supported_varlen() saying the same, and nothing written.
#include <gtest/gtest.h>

#include <functional>

#include "test_util.h"

namespace tileattn::test {
namespace {

// A valid packed batch (lengths 3, 0, 5 queries; 4, 2, 6 keys) that each case spoils.
struct VarArgs {
  Case c;
  Result r;
  std::array<TensorRef, 4> refs;
  Seqlens s;
  TensorRef q, k, v, out, lse;
  Options options;
  VarArgs() : c(make(), 3), r(fresh_outputs(c.problem)) {
    s = c.seqlens([](const HostTensor& t) { return t.ref(); }, &refs);
    q = c.q.ref(), k = c.k.ref(), v = c.v.ref(), out = r.out.ref(), lse = r.lse.ref();
  }
  static Problem make() {
    Problem p;
    p.heads_q = 4, p.heads_kv = 2, p.head_dim = 8;
    p = varlen_problem(p, {3, 0, 5}, {4, 2, 6});
    p.used_k = {4, 1, 6};
    return p;
  }
  void set(int i, std::vector<int32_t> values) {  // replaces index tensor i's contents
    for (size_t j = 0; j < values.size(); ++j) static_cast<int32_t*>(refs[i].data)[j] = values[j];
  }
};

struct Bad {
  std::string name;
  std::function<void(VarArgs&)> spoil;
  std::string argument, value;
};

std::vector<Bad> bad_cases() {
  return {
      {"cu_q_not_monotonic",
       [](VarArgs& a) {
         a.set(0, {0, 3, 2, 8});
       },
       "seqlens.cu_seqlens_q", "entry 2 is 2"},
      {"cu_q_first",
       [](VarArgs& a) {
         a.set(0, {1, 3, 3, 8});
       },
       "seqlens.cu_seqlens_q", "entry 0 is 1, expected 0"},
      {"cu_q_last",
       [](VarArgs& a) {
         a.set(0, {0, 3, 3, 7});
       },
       "seqlens.cu_seqlens_q", "expected q's row count 8"},
      {"cu_k_last",
       [](VarArgs& a) {
         a.set(1, {0, 4, 6, 13});
       },
       "seqlens.cu_seqlens_k", "expected k's row count 12"},
      {"used_k_past_length",
       [](VarArgs& a) {
         a.set(3, {4, 3, 6});
       },
       "seqlens.seqused_k", "entry 1 is 3, outside 0..2"},
      {"used_k_negative",
       [](VarArgs& a) {
         a.set(3, {-1, 1, 6});
       },
       "seqlens.seqused_k", "entry 0 is -1"},
      {"max_q_too_small", [](VarArgs& a) { a.s.max_seqlen_q = 4; }, "seqlens.max_seqlen_q",
       "4 is less than sequence 2's length 5"},
      {"cu_q_fp32", [](VarArgs& a) { a.refs[0].dtype = DType::kFloat32; }, "seqlens.cu_seqlens_q",
       "dtype fp32, expected int32"},
      {"cu_q_rank2", [](VarArgs& a) { a.refs[0].rank = 2; }, "seqlens.cu_seqlens_q", "rank 2"},
      {"cu_k_entries", [](VarArgs& a) { a.refs[1].shape[0] = 3; }, "seqlens.cu_seqlens_k",
       "has 3 entries, expected 4"},
      {"used_k_entries", [](VarArgs& a) { a.refs[3].shape[0] = 2; }, "seqlens.seqused_k",
       "has 2 entries, expected 3"},
      {"cu_q_strided", [](VarArgs& a) { a.refs[0].stride[0] = 2; }, "seqlens.cu_seqlens_q", "stride 2"},
      {"cu_k_on_gpu", [](VarArgs& a) { a.refs[1].device = Device::cuda(0); }, "seqlens.cu_seqlens_k",
       "is on cuda:0"},
      {"q_rank4", [](VarArgs& a) { a.q.rank = 4; }, "q", "rank 4"},
      {"lse_total", [](VarArgs& a) { a.lse.shape[1] = 7; }, "lse", "total_q (dim 1) is 7, expected 8"},
      {"splits_negative", [](VarArgs& a) { a.options.num_splits = -1; }, "options.num_splits", "-1"},
      {"splits_too_many", [](VarArgs& a) { a.options.num_splits = kMaxSplits + 1; }, "options.num_splits",
       "257"},
  };
}

class BadVarlen : public testing::TestWithParam<Bad> {};

TEST_P(BadVarlen, ThrowsNamingArgumentAndWritesNothing) {
  const Bad& bc = GetParam();
  VarArgs a;
  bc.spoil(a);
  try {
    forward_varlen(a.q, a.k, a.v, a.out, &a.lse, a.s, a.options);
    ADD_FAILURE() << "forward_varlen accepted the bad input";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), bc.argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(bc.value), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.r.out.count_unwritten(), a.r.out.numel());
  EXPECT_EQ(a.r.lse.count_unwritten(), a.r.lse.numel());
  const Support s = supported_varlen(a.q, a.k, a.v, a.out, &a.lse, a.s, a.options);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find(bc.value), std::string::npos) << s.reason;
}

INSTANTIATE_TEST_SUITE_P(Cpu, BadVarlen, testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Varlen, GoodArgumentsPass) {
  VarArgs a;
  EXPECT_TRUE(supported_varlen(a.q, a.k, a.v, a.out, &a.lse, a.s).ok);
  a.s.max_seqlen_q = a.s.max_seqlen_k = -1;  // the CPU computes the maxima
  EXPECT_TRUE(supported_varlen(a.q, a.k, a.v, a.out, &a.lse, a.s).ok);
}

}  // namespace
}  // namespace tileattn::test
