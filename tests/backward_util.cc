// backward_util.cc: the backward's test harness (backward_util.h).
#include "backward_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tileattn::test {
namespace {

// Largest |x - ref| where ref is finite; non-finite ref values (and elements the oracle left
// unwritten: rows past seqused) must be matched exactly. Returns the error, counts mismatches.
double grad_error(const HostTensor& x, const HostTensor& ref, int64_t* mismatches, double* ref_max) {
  double err = 0;
  ref.for_each([&](const Index& i) {
    if (ref.is_poison(i)) {
      *mismatches += !x.is_poison(i);
      return;
    }
    const double r = ref.get(i), v = x.get(i);
    if (std::isnan(r))
      *mismatches += !std::isnan(v);
    else if (!std::isfinite(v))
      ++*mismatches;
    else
      err = std::max(err, std::abs(v - r)), *ref_max = std::max(*ref_max, std::abs(r));
  });
  return err;
}

// Gradients' atol: a rounding of the largest gradient in the dtype, and at least of 1 (the inputs'
// scale): dS = P (dP - dsum) cancels terms of the inputs' size, so a gradient that is zero in
// exact arithmetic (one key: dQ = dK = 0) comes out at a rounding of them, not of itself (fp32,
// Lk = 1: ~1e-7 where eager's happens to be exactly 0).
double grad_atol(DType dtype, double scale) {
  const double eps = dtype == DType::kFloat32   ? 1e-6
                     : dtype == DType::kFloat16 ? std::ldexp(1.0, -10)
                                                : std::ldexp(1.0, -7);
  return eps * std::max(1.0, scale);
}

}  // namespace

bool same_bits(const Grads& a, const Grads& b) {
  return a.dq.bytes() == b.dq.bytes() && a.dk.bytes() == b.dk.bytes() && a.dv.bytes() == b.dv.bytes();
}

Grads fresh_grads(const Problem& p, DType dtype) {
  Grads g{like_q(p, dtype, p.q_layout), like_k(p, dtype, p.kv_layout), like_k(p, dtype, p.kv_layout)};
  g.dq.poison(), g.dk.poison(), g.dv.poison();
  return g;
}

BackwardCase::BackwardCase(const Problem& p, bool with_dlse)
    : c(p, rng_for(p.name())()), with_dlse(with_dlse) {
  Problem with_lse = p;
  with_lse.with_lse = true;
  c.problem = with_lse;
  fwd = run_forward(c);
  dout = like_q(p, p.dtype, p.out_layout);
  std::mt19937_64 rng = rng_for(p.name() + " dout");
  dout.fill_normal(rng);
  if (p.varlen()) poison_unused_rows(dout, p, true);  // like q's: no gradient may read them
  seqlens = c.seqlens([](const HostTensor& t) { return t.ref(); }, &index_refs);
  std::vector<int64_t> lse_shape;
  for (int d = 0; d < fwd.lse.rank(); ++d) lse_shape.push_back(fwd.lse.dim(d));
  dlse = HostTensor::contiguous(DType::kFloat32, lse_shape);
  dlse.fill_normal(rng);
}

const TensorRef* BackwardCase::dlse_ref() const {
  static thread_local TensorRef ref;
  ref = dlse.ref();
  return with_dlse ? &ref : nullptr;
}

Grads BackwardCase::run(const Options& options) const {
  Grads g = fresh_grads(c.problem, c.problem.dtype);
  if (c.problem.varlen())
    backward_varlen(dout.ref(), c.q.ref(), c.k.ref(), c.v.ref(), fwd.out.ref(), fwd.lse.ref(), g.dq.ref(),
                    g.dk.ref(), g.dv.ref(), seqlens, options, dlse_ref());
  else
    backward(dout.ref(), c.q.ref(), c.k.ref(), c.v.ref(), fwd.out.ref(), fwd.lse.ref(), g.dq.ref(),
             g.dk.ref(), g.dv.ref(), options, dlse_ref());
  return g;
}

Grads BackwardCase::oracle() const {
  Grads g = fresh_grads(c.problem, DType::kFloat64);
  if (c.problem.varlen())
    reference_backward_varlen(dout.ref(), c.q.ref(), c.k.ref(), c.v.ref(), g.dq.ref(), g.dk.ref(), g.dv.ref(),
                              seqlens, c.problem.options, dlse_ref());
  else
    reference_backward(dout.ref(), c.q.ref(), c.k.ref(), c.v.ref(), g.dq.ref(), g.dk.ref(), g.dv.ref(),
                       c.problem.options, dlse_ref());
  return g;
}

Grads BackwardCase::eager() const {
  const Problem& p = c.problem;
  Grads g = fresh_grads(p, p.dtype);
  if (!p.varlen()) {
    eager_backward(dout.ref(), c.q.ref(), c.k.ref(), c.v.ref(), g.dq.ref(), g.dk.ref(), g.dv.ref(), p.options,
                   dlse_ref());
    return g;
  }
  // Each sequence as a dense batch of one, written into its rows of the gradients.
  int64_t q0 = 0, k0 = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t lq = p.len_q(b), lk = p.len_k(b);
    const TensorRef dl = seq_lse_view(dlse, p.packed_q, q0, b, lq);
    eager_backward(seq_view(dout, p.packed_q, q0, b, lq), seq_view(c.q, p.packed_q, q0, b, lq),
                   seq_view(c.k, p.packed_k, k0, b, lk), seq_view(c.v, p.packed_k, k0, b, lk),
                   seq_view(g.dq, p.packed_q, q0, b, lq), seq_view(g.dk, p.packed_k, k0, b, lk),
                   seq_view(g.dv, p.packed_k, k0, b, lk), p.options, with_dlse ? &dl : nullptr);
    q0 += p.packed_q ? p.lens_q[b] : 0;
    k0 += p.packed_k ? p.lens_k[b] : 0;
  }
  return g;
}

void check_backward(const Problem& p, bool with_dlse, const BackwardRunner& runner) {
  const BackwardCase bc(p, with_dlse);
  const Grads ours = runner ? runner(bc, p.options) : bc.run(p.options), ref = bc.oracle(), base = bc.eager();
  const char* names[] = {"dq", "dk", "dv"};
  const HostTensor* o[] = {&ours.dq, &ours.dk, &ours.dv};
  const HostTensor* r[] = {&ref.dq, &ref.dk, &ref.dv};
  const HostTensor* e[] = {&base.dq, &base.dk, &base.dv};
  for (int g = 0; g < 3; ++g) {
    int64_t mismatches = 0, eager_mismatches = 0;
    double ref_max = 0, eager_max = 0;
    const double err = grad_error(*o[g], *r[g], &mismatches, &ref_max);
    EXPECT_EQ(mismatches, 0) << p.name() << " " << names[g]
                             << ": non-finite or stray values differ from the oracle's";
    EXPECT_EQ(o[g]->count_gaps_changed(), 0) << p.name() << " " << names[g] << " written outside its view";
    const double eager_err = grad_error(*e[g], *r[g], &eager_mismatches, &eager_max);
    EXPECT_LE(err, 3 * eager_err + grad_atol(p.dtype, ref_max))
        << p.name() << " " << names[g] << ": eager's error " << eager_err << ", |grad| " << ref_max;
    if (p.dtype == DType::kFloat32) {
      EXPECT_LE(err, 1e-4 * std::max(1.0, ref_max)) << p.name() << " " << names[g] << " (fp32)";
    }
  }
}

}  // namespace tileattn::test
