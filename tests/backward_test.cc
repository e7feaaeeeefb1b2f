// backward_test.cc: backward() on the CPU against the fp64 oracle of DESIGN.md section 7's
// formulas, with eager autograd's error in the same dtype as the yardstick (err <= 3 err(eager)
// + atol for dq, dk and dv each); varlen batches against each sequence run alone; NaN, empty
// rows, GQA sums, determinism and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backward_util.h"

namespace tileattn::test {
namespace {

void check(const Problem& p, bool with_dlse = false) { check_backward(p, with_dlse); }

Problem make(int64_t lq, int64_t lk, int64_t hq, int64_t hkv, int64_t d, DType dtype) {
  Problem p;
  p.seqlen_q = lq, p.seqlen_k = lk, p.heads_q = hq, p.heads_kv = hkv, p.head_dim = d, p.dtype = dtype;
  return p;
}

std::vector<Problem> problems() {
  std::vector<Problem> out;
  const struct {
    int64_t lq, lk, hq, hkv, d;
  } shapes[] = {
      {1, 1, 2, 1, 16}, {17, 63, 4, 2, 40}, {65, 64, 2, 2, 64}, {113, 203, 8, 1, 32}, {203, 113, 2, 1, 96}};
  for (const auto& s : shapes)
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
      for (int mask = 0; mask < 4; ++mask) {
        Problem p = make(s.lq, s.lk, s.hq, s.hkv, s.d, dtype);
        if (mask == 1) p.options.causal = true;
        if (mask == 2) p.options.window_left = 20, p.options.window_right = 5;
        if (mask == 3) p.options.softcap = 8.0f, p.options.causal = true;
        out.push_back(p);
      }
  Problem strided = make(70, 90, 4, 2, 32, DType::kBFloat16);
  strided.batch = 2;
  strided.q_layout = strided.kv_layout = strided.out_layout = Layout::kBHLD;
  out.push_back(strided);
  return out;
}

class Backward : public testing::TestWithParam<Problem> {};
TEST_P(Backward, MatchesOracle) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cpu, Backward, testing::ValuesIn(problems()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

TEST(Backward, VarlenMatchesOracleAndEachSequenceAlone) {
  Problem base = make(0, 0, 4, 2, 32, DType::kFloat32);
  base.options.causal = true;
  Problem p = varlen_problem(base, {17, 0, 65, 1}, {63, 4, 65, 130});
  p.used_k = {63, 4, 40, 130};
  check(p);
  // Each sequence as a dense batch of one gives the same bits (the same work item, in order).
  const BackwardCase bc(p);
  const Grads all = bc.run(p.options);
  int64_t q0 = 0, k0 = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    Problem one = make(p.len_q(b), p.len_k(b), 4, 2, 32, DType::kFloat32);
    one.options = p.options;
    if (one.seqlen_q > 0 && one.seqlen_k > 0) {
      BackwardCase s(one);
      for (auto [dst, src, start, n] :
           {std::tuple<HostTensor*, const HostTensor*, int64_t, int64_t>{&s.c.q, &bc.c.q, q0, one.seqlen_q},
            {&s.dout, &bc.dout, q0, one.seqlen_q},
            {&s.fwd.out, &bc.fwd.out, q0, one.seqlen_q},
            {&s.c.k, &bc.c.k, k0, one.seqlen_k},
            {&s.c.v, &bc.c.v, k0, one.seqlen_k}})
        dst->for_each([&](const Index& i) { dst->set(i, src->get({start + i[1], i[2], i[3], 0})); });
      s.fwd.lse.for_each([&](const Index& i) { s.fwd.lse.set(i, bc.fwd.lse.get({i[1], q0 + i[2], 0, 0})); });
      const Grads g = s.run(one.options);
      g.dq.for_each([&](const Index& i) { EXPECT_EQ(g.dq.get(i), all.dq.get({q0 + i[1], i[2], i[3], 0})); });
      g.dk.for_each([&](const Index& i) { EXPECT_EQ(g.dk.get(i), all.dk.get({k0 + i[1], i[2], i[3], 0})); });
    }
    q0 += p.lens_q[b], k0 += p.lens_k[b];
  }
}

// The oracle's formulas against central differences of the fp64 forward oracle, for the loss
// sum(dout * out) + sum(dlse * lse): every gradient element, masks and softcap included.
TEST(Backward, OracleIsTheDerivativeOfTheForward) {
  Options causal_cap, window;
  causal_cap.causal = true, causal_cap.softcap = 2.0f;
  window.window_left = 2, window.window_right = 1;
  for (const Options& options : {Options{}, causal_cap, window}) {
    std::mt19937_64 rng = rng_for("finite differences");
    auto tensor = [&](std::vector<int64_t> shape) {
      HostTensor t = HostTensor::contiguous(DType::kFloat64, std::move(shape));
      t.fill_normal(rng);
      return t;
    };
    HostTensor q = tensor({1, 5, 2, 4}), k = tensor({1, 7, 1, 4}), v = tensor({1, 7, 1, 4});
    const HostTensor dout = tensor({1, 5, 2, 4}), dlse = tensor({1, 2, 5});
    HostTensor dq = tensor({1, 5, 2, 4}), dk = tensor({1, 7, 1, 4}), dv = tensor({1, 7, 1, 4});
    const TensorRef dlse_ref = dlse.ref();
    reference_backward(dout.ref(), q.ref(), k.ref(), v.ref(), dq.ref(), dk.ref(), dv.ref(), options,
                       &dlse_ref);
    const auto loss = [&] {
      HostTensor out = HostTensor::contiguous(DType::kFloat64, {1, 5, 2, 4});
      HostTensor lse = HostTensor::contiguous(DType::kFloat64, {1, 2, 5});
      const TensorRef lse_ref = lse.ref();
      reference(q.ref(), k.ref(), v.ref(), out.ref(), &lse_ref, options);
      double sum = 0;
      out.for_each([&](const Index& i) { sum += out.get(i) * dout.get(i); });
      lse.for_each([&](const Index& i) { sum += std::isinf(lse.get(i)) ? 0.0 : lse.get(i) * dlse.get(i); });
      return sum;
    };
    for (auto [x, grad] : {std::pair<HostTensor*, const HostTensor*>{&q, &dq}, {&k, &dk}, {&v, &dv}})
      x->for_each([&](const Index& i) {
        const double x0 = x->get(i), h = 1e-5;
        x->set(i, x0 + h);
        const double up = loss();
        x->set(i, x0 - h);
        const double down = loss();
        x->set(i, x0);
        EXPECT_NEAR(grad->get(i), (up - down) / (2 * h), 1e-6)
            << options.causal << " " << i[1] << "," << i[2];
      });
  }
}

// A loss on the returned LSE too (what merging partial results backpropagates through).
TEST(Backward, GradientOfTheLse) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Problem p = make(70, 130, 4, 2, 48, dtype);
    p.options.causal = true;
    check(p, true);
    p.options.causal = false, p.options.softcap = 5.0f;
    check(p, true);
  }
  Problem base = make(0, 0, 2, 1, 32, DType::kFloat32);
  check(varlen_problem(base, {17, 0, 65}, {63, 4, 65}), true);
  // dlse changes the gradients (the test above is not vacuous) ...
  const Problem small = make(20, 30, 2, 1, 16, DType::kFloat32);
  const BackwardCase plain(small), with(small, true);
  EXPECT_NE(plain.run({}).dq.bytes(), with.run({}).dq.bytes());
  // ... and must look like lse.
  TensorRef bad = with.dlse.ref();
  bad.shape[1] = 1;
  Grads g = fresh_grads(with.c.problem, DType::kFloat32);
  try {
    backward(with.dout.ref(), with.c.q.ref(), with.c.k.ref(), with.c.v.ref(), with.fwd.out.ref(),
             with.fwd.lse.ref(), g.dq.ref(), g.dk.ref(), g.dv.ref(), {}, &bad);
    ADD_FAILURE() << "accepted a dlse of the wrong shape";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dlse") << e.what();
  }
  EXPECT_EQ(g.dq.count_unwritten(), g.dq.numel());
}

// Low precision varlen: eager's yardstick per sequence, seqused rows unwritten, an LSE gradient.
TEST(Backward, VarlenLowPrecision) {
  Problem base = make(0, 0, 4, 2, 40, DType::kBFloat16);
  base.options.window_left = 10;
  Problem p = varlen_problem(base, {33, 7, 0, 20}, {20, 70, 5, 64});
  p.used_q = {30, 7, 0, 20}, p.used_k = {20, 66, 5, 64};
  check(p, true);
  Problem dense = make(40, 90, 2, 1, 24, DType::kFloat16);
  dense.batch = 2, dense.used_q = {40, 11}, dense.used_k = {0, 90};
  dense.options.causal = true;
  check(dense);
  Problem mixed = p;  // a packed q against a dense k with seqused_k
  mixed.packed_k = false, mixed.seqlen_k = 50, mixed.lens_k.clear(), mixed.used_k = {50, 3, 0, 17};
  check(mixed, true);
}

TEST(Backward, NanReachesOnlyWhatSeesIt) {
  Problem p = make(80, 80, 2, 1, 32, DType::kFloat32);
  p.options.causal = true;
  BackwardCase bc(p);
  bc.c.k.set({0, 50, 0, 3}, std::numeric_limits<double>::quiet_NaN());  // rows < 50 do not see key 50
  bc.c.run_oracle();
  bc.fwd = run_forward(bc.c);
  const Grads g = bc.run(p.options);
  for (int64_t i = 0; i < 50; ++i)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 32; ++d) ASSERT_TRUE(std::isfinite(g.dq.get({0, i, h, d}))) << i;
  for (int64_t d = 0; d < 32; ++d) EXPECT_TRUE(std::isnan(g.dq.get({0, 60, 0, d})));
  check(p);  // and the oracle's NaN pattern everywhere else
}

// The whole-block GEMMs take a partly masked block only while what its hidden zeros multiply is
// finite: a NaN in Q or dO reaches no key its row does not see, in either dtype, across the
// diagonal of 128-row blocks (row 100, keys 101..127 in its block).
TEST(Backward, NanInQOrDoReachesOnlyKeysItsRowSees) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (int where : {0, 1}) {  // 0: Q, 1: dO
      Problem p = make(300, 300, 1, 1, 64, dtype);
      p.options.causal = true;
      BackwardCase bc(p);
      for (int64_t d = 0; d < 64; d += 7) (where == 0 ? bc.c.q : bc.dout).set({0, 100, 0, d}, nan);
      bc.c.run_oracle();
      bc.fwd = run_forward(bc.c);
      const Grads g = bc.run(p.options);
      for (int64_t j = 101; j < 300; ++j)
        for (int64_t d = 0; d < 64; ++d) {
          ASSERT_TRUE(std::isfinite(g.dk.get({0, j, 0, d}))) << where << " key " << j;
          ASSERT_TRUE(std::isfinite(g.dv.get({0, j, 0, d}))) << where << " key " << j;
        }
      for (int64_t i = 0; i < 300; ++i) {
        if (i == 100) continue;
        for (int64_t d = 0; d < 64; ++d)
          ASSERT_TRUE(std::isfinite(g.dq.get({0, i, 0, d}))) << where << " row " << i;
      }
      EXPECT_TRUE(std::isnan(g.dk.get({0, 50, 0, 0})) && std::isnan(g.dv.get({0, 50, 0, 0}))) << where;
    }
}

// Under a sliding window a NaN key makes the LSE of the rows that see it NaN; their hidden
// weights must still be 0 in the whole-block GEMMs, so keys only other rows see (211..299 here,
// whose rows never see key 110) keep finite dK and dV, fp32 and bf16.
TEST(Backward, NanLseOfOtherRowsStaysOutOfKeysTheyDoNotSee) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Problem p = make(300, 300, 1, 1, 64, dtype);
    p.options.window_left = 100, p.options.window_right = 0;
    BackwardCase bc(p);
    bc.c.k.set({0, 110, 0, 5}, std::numeric_limits<double>::quiet_NaN());
    bc.c.run_oracle();
    bc.fwd = run_forward(bc.c);
    const Grads g = bc.run(p.options);
    for (int64_t j = 211; j < 300; ++j)
      for (int64_t d = 0; d < 64; ++d) {
        ASSERT_TRUE(std::isfinite(g.dk.get({0, j, 0, d}))) << "key " << j;
        ASSERT_TRUE(std::isfinite(g.dv.get({0, j, 0, d}))) << "key " << j;
      }
    EXPECT_TRUE(std::isnan(g.dv.get({0, 150, 0, 0})));  // seen by rows 150..210, which see key 110
  }
}

TEST(Backward, RowsThatSeeNoKeyGetZero) {
  Problem p = make(90, 40, 2, 2, 16, DType::kBFloat16);
  p.options.window_left = 0, p.options.window_right = 0;  // rows 0..49 sit before every key
  check(p);
  const BackwardCase bc(p);
  const Grads g = bc.run(p.options);
  for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(g.dq.get({0, 10, 1, d}), 0.0);
}

TEST(Backward, SameBitsForAnyThreadCountAndRun) {
  Problem p = make(150, 170, 8, 2, 64, DType::kBFloat16);
  p.batch = 3;
  p.options.causal = true;
  const BackwardCase bc(p);
  Options one = p.options;
  one.num_threads = 1;
  const Grads first = bc.run(one);
  for (int threads : {2, 3, 0}) {
    Options o = p.options;
    o.num_threads = threads;
    o.deterministic = threads == 3;
    const Grads again = bc.run(o);
    EXPECT_TRUE(same_bits(again, first)) << threads << " threads";
  }
}

TEST(Backward, BadArgumentsNameThemselvesAndWriteNothing) {
  const BackwardCase bc(make(9, 11, 2, 1, 16, DType::kFloat32));
  Grads g = fresh_grads(bc.c.problem, DType::kFloat32);
  const TensorRef dq = g.dq.ref(), dk = g.dk.ref(), dv = g.dv.ref();
  auto expect = [&](const TensorRef& dout, const TensorRef& lse, const TensorRef& gq, const TensorRef& gk,
                    const std::string& argument, const std::string& text) {
    try {
      backward(dout, bc.c.q.ref(), bc.c.k.ref(), bc.c.v.ref(), bc.fwd.out.ref(), lse, gq, gk, dv);
      ADD_FAILURE() << "accepted: " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_EQ(g.dq.count_unwritten(), g.dq.numel());
    EXPECT_EQ(g.dk.count_unwritten(), g.dk.numel());
  };
  TensorRef bad = dq;
  bad.shape[1] = 8;
  expect(bc.dout.ref(), bc.fwd.lse.ref(), bad, dk, "dq", "differs from q's");
  bad = dk;
  bad.dtype = DType::kBFloat16;
  expect(bc.dout.ref(), bc.fwd.lse.ref(), dq, bad, "dk", "dtype bf16");
  bad = bc.dout.ref();
  bad.shape[2] = 1;
  expect(bad, bc.fwd.lse.ref(), dq, dk, "dout", "differs from out's");
  bad = bc.fwd.lse.ref();
  bad.shape[2] = 3;
  expect(bc.dout.ref(), bad, dq, dk, "lse", "seqlen_q (dim 2) is 3");
  expect(bc.dout.ref(), bc.fwd.lse.ref(), bc.c.q.ref(), dk, "dq", "overlaps q");
  bad = dk;
  bad.data = g.dq.ref().data;  // dk's shape, inside dq's memory
  expect(bc.dout.ref(), bc.fwd.lse.ref(), dq, bad, "dq", "overlaps another gradient");
  // supported_backward says what backward() would do, and why not, without writing anything.
  const Support ok = supported_backward(bc.dout.ref(), bc.c.q.ref(), bc.c.k.ref(), bc.c.v.ref(),
                                        bc.fwd.out.ref(), bc.fwd.lse.ref(), dq, dk, dv);
  EXPECT_TRUE(ok.ok) << ok.reason;
  EXPECT_EQ(ok.kernel, Kernel::kCpuTiled);
  bad = dk;
  bad.dtype = DType::kBFloat16;
  const Support no = supported_backward(bc.dout.ref(), bc.c.q.ref(), bc.c.k.ref(), bc.c.v.ref(),
                                        bc.fwd.out.ref(), bc.fwd.lse.ref(), dq, bad, dv);
  EXPECT_FALSE(no.ok);
  EXPECT_EQ(no.reason.rfind("dk: ", 0), 0u) << no.reason;
  EXPECT_EQ(g.dq.count_unwritten(), g.dq.numel());
  // A GPU kernel asked for with CPU tensors (the backward's own check, not the forward's).
  for (Kernel kernel : {Kernel::kCudaSm80, Kernel::kCudaSm90}) {
    Options o;
    o.kernel = kernel;
    try {
      backward(bc.dout.ref(), bc.c.q.ref(), bc.c.k.ref(), bc.c.v.ref(), bc.fwd.out.ref(), bc.fwd.lse.ref(),
               dq, dk, dv, o);
      ADD_FAILURE() << "accepted kernel " << kernel_name(kernel) << " on the CPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "options.kernel") << e.what();
      EXPECT_NE(std::string(e.what()).find(kernel_name(kernel)), std::string::npos) << e.what();
    }
    const Support gpu = supported_backward(bc.dout.ref(), bc.c.q.ref(), bc.c.k.ref(), bc.c.v.ref(),
                                           bc.fwd.out.ref(), bc.fwd.lse.ref(), dq, dk, dv, o);
    EXPECT_FALSE(gpu.ok);
    EXPECT_EQ(gpu.reason.rfind("options.kernel: ", 0), 0u) << gpu.reason;
    EXPECT_EQ(g.dq.count_unwritten(), g.dq.numel());
  }
}

}  // namespace
}  // namespace tileattn::test
