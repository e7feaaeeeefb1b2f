// test_runs.cc: the harness's runs: a case's inputs (dense or varlen), the oracle, forward and
// eager, error measurement, the tolerance table and the rule (test_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "test_util.h"

namespace tileattn::test {
namespace {

int64_t total(const std::vector<int64_t>& lens) {
  int64_t t = 0;
  for (int64_t x : lens) t += x;
  return t;
}

// An int32 index tensor holding `values` (empty: none).
HostTensor index_tensor(const std::vector<int64_t>& values) {
  HostTensor t = HostTensor::contiguous(DType::kInt32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i)
    t.set({static_cast<int64_t>(i), 0, 0, 0}, static_cast<double>(values[i]));
  return t;
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// q, k, v or out of the problem: packed [total, H, D] or dense in its layout.
HostTensor rows_tensor(const Problem& p, bool packed, const std::vector<int64_t>& lens, int64_t L, int64_t H,
                       Layout layout, DType dtype) {
  if (packed) return HostTensor::contiguous(dtype, {total(lens), H, p.head_dim});
  return HostTensor::blhd(dtype, p.batch, L, H, p.head_dim, layout);
}

}  // namespace

void poison_unused_rows(HostTensor& t, const Problem& p, bool side_q) {
  const bool packed = side_q ? p.packed_q : p.packed_k;
  const std::vector<int64_t>& lens = side_q ? p.lens_q : p.lens_k;
  const std::vector<int64_t> cu = packed ? prefix_sums(lens) : std::vector<int64_t>{};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t stored = packed ? lens[b] : (side_q ? p.seqlen_q : p.seqlen_k);
    const int64_t used = side_q ? p.len_q(b) : p.len_k(b);
    for (int64_t i = used; i < stored; ++i)
      for (int64_t h = 0; h < (packed ? t.dim(1) : t.dim(2)); ++h)
        for (int64_t d = 0; d < p.head_dim; ++d)
          t.set(packed ? Index{cu[b] + i, h, d, 0} : Index{b, i, h, d}, nan);
  }
}

Case::Case(const Problem& p, uint64_t seed) : problem(p) {
  std::mt19937_64 rng(seed);
  q = rows_tensor(p, p.packed_q, p.lens_q, p.seqlen_q, p.heads_q, p.q_layout, p.dtype);
  k = rows_tensor(p, p.packed_k, p.lens_k, p.seqlen_k, p.heads_kv, p.kv_layout, p.dtype);
  v = rows_tensor(p, p.packed_k, p.lens_k, p.seqlen_k, p.heads_kv, p.kv_layout, p.dtype);
  q.fill_normal(rng, p.input_stddev);
  k.fill_normal(rng, p.input_stddev);
  v.fill_normal(rng, 1.0);
  if (p.varlen()) {
    poison_unused_rows(q, p, true);
    poison_unused_rows(k, p, false);
    poison_unused_rows(v, p, false);
  }
  if (p.packed_q) cu_q = index_tensor(prefix_sums(p.lens_q));
  if (p.packed_k) cu_k = index_tensor(prefix_sums(p.lens_k));
  if (!p.used_q.empty()) used_q = index_tensor(p.used_q);
  if (!p.used_k.empty()) used_k = index_tensor(p.used_k);
  const int64_t B = p.batch, Lq = p.seqlen_q, Hq = p.heads_q, D = p.head_dim;
  ref_out = p.packed_q ? HostTensor::contiguous(DType::kFloat64, {total(p.lens_q), Hq, D})
                       : HostTensor::contiguous(DType::kFloat64, {B, Lq, Hq, D});
  ref_lse = p.packed_q ? HostTensor::contiguous(DType::kFloat64, {Hq, total(p.lens_q)})
                       : HostTensor::contiguous(DType::kFloat64, {B, Hq, Lq});
}

Seqlens Case::seqlens(const std::function<TensorRef(const HostTensor&)>& view,
                      std::array<TensorRef, 4>* refs) const {
  const Problem& p = problem;
  Seqlens s;
  if (p.packed_q) (*refs)[0] = view(cu_q), s.cu_seqlens_q = &(*refs)[0], s.max_seqlen_q = p.seqlen_q;
  if (p.packed_k) (*refs)[1] = view(cu_k), s.cu_seqlens_k = &(*refs)[1], s.max_seqlen_k = p.seqlen_k;
  if (!p.used_q.empty()) (*refs)[2] = view(used_q), s.seqused_q = &(*refs)[2];
  if (!p.used_k.empty()) (*refs)[3] = view(used_k), s.seqused_k = &(*refs)[3];
  return s;
}

void Case::run_oracle() {
  ref_out.poison();
  ref_lse.poison();
  const TensorRef lse = ref_lse.ref();
  if (!problem.varlen()) {
    reference(q.ref(), k.ref(), v.ref(), ref_out.ref(), &lse, problem.options);
    return;
  }
  std::array<TensorRef, 4> refs;
  reference_varlen(q.ref(), k.ref(), v.ref(), ref_out.ref(), &lse,
                   seqlens([](const HostTensor& t) { return t.ref(); }, &refs), problem.options);
}

HostTensor like_q(const Problem& p, DType dtype, Layout layout) {
  return rows_tensor(p, p.packed_q, p.lens_q, p.seqlen_q, p.heads_q, layout, dtype);
}

HostTensor like_k(const Problem& p, DType dtype, Layout layout) {
  return rows_tensor(p, p.packed_k, p.lens_k, p.seqlen_k, p.heads_kv, layout, dtype);
}

Result fresh_outputs(const Problem& p) {
  Result r;
  if (p.packed_q) {
    r.out = HostTensor::contiguous(p.dtype, {total(p.lens_q), p.heads_q, p.head_dim});
    r.lse = HostTensor::contiguous(DType::kFloat32, {p.heads_q, total(p.lens_q)});
  } else {
    r.out = HostTensor::blhd(p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.out_layout);
    r.lse = HostTensor::bhl(DType::kFloat32, p.batch, p.heads_q, p.seqlen_q, p.lse_layout);
  }
  r.out.poison();
  r.lse.poison();
  return r;
}

Result run_forward(const Case& c) {
  Options o = c.problem.options;  // the case's host tensors: a CUDA kernel it forces is for its GPU run
  if (o.kernel == Kernel::kCudaSm80 || o.kernel == Kernel::kCudaSm90) o.kernel = Kernel::kAuto;
  return run_forward(c, o);
}

Result run_forward(const Case& c, const Options& options) {
  Result r = fresh_outputs(c.problem);
  const TensorRef lse = r.lse.ref();
  const TensorRef* lse_arg = c.problem.with_lse ? &lse : nullptr;
  if (!c.problem.varlen()) {
    forward(c.q.ref(), c.k.ref(), c.v.ref(), r.out.ref(), lse_arg, options);
    return r;
  }
  std::array<TensorRef, 4> refs;
  forward_varlen(c.q.ref(), c.k.ref(), c.v.ref(), r.out.ref(), lse_arg,
                 c.seqlens([](const HostTensor& t) { return t.ref(); }, &refs), options);
  return r;
}

Result run_eager(const Case& c, EagerStats* stats) {
  Result r = fresh_outputs(c.problem);
  const TensorRef lse = r.lse.ref();
  eager(c.q.ref(), c.k.ref(), c.v.ref(), r.out.ref(), &lse, c.problem.options, stats);
  return r;
}

namespace {
// Folds one (ours, truth) pair into the running error; non-finite truths must match exactly.
void fold(double ours, double truth, double* err, Errors* e, const char* what, const Index& idx) {
  bool ok;
  if (std::isnan(truth)) {
    ok = std::isnan(ours);
  } else if (std::isinf(truth)) {
    ok = ours == truth;
  } else {
    ok = std::isfinite(ours);
    if (ok) *err = std::max(*err, std::abs(ours - truth));
  }
  if (!ok) {
    if (e->mismatches == 0) {
      std::ostringstream os;
      os << what << "[" << idx[0] << ", " << idx[1] << ", " << idx[2];
      if (what[0] == 'o') os << ", " << idx[3];
      os << "] = " << ours << ", oracle " << truth;
      e->first_mismatch = os.str();
    }
    ++e->mismatches;
  }
}
}  // namespace

Errors measure(const Result& r, const Case& c) {
  Errors e;
  // Elements the oracle did not write (rows past seqused) must be left alone too.
  const auto visit = [&](const HostTensor& ref, const HostTensor& ours, double* err, const char* what) {
    ref.for_each([&](const Index& idx) {
      if (ref.is_poison(idx)) {
        if (!ours.is_poison(idx) && e.mismatches++ == 0) {
          std::ostringstream os;
          os << what << "[" << idx[0] << ", " << idx[1] << ", " << idx[2] << ", " << idx[3]
             << "] = " << ours.get(idx)
             << " was written, but the oracle leaves it alone (a row past seqused)";
          e.first_mismatch = os.str();
        }
        return;
      }
      fold(ours.get(idx), ref.get(idx), err, &e, what, idx);
    });
  };
  visit(c.ref_out, r.out, &e.out, "out");
  if (c.problem.with_lse) visit(c.ref_lse, r.lse, &e.lse, "lse");
  return e;
}

TensorRef seq_view(const HostTensor& t, bool packed, int64_t start, int64_t b, int64_t len) {
  TensorRef r = t.ref();
  const int64_t esize = static_cast<int64_t>(dtype_size(r.dtype));
  if (packed) {
    r.data = static_cast<char*>(r.data) + start * r.stride[0] * esize;
    return TensorRef::strided(r.data, r.dtype, {1, len, r.shape[1], r.shape[2]},
                              {len * r.stride[0], r.stride[0], r.stride[1], r.stride[2]});
  }
  r.data = static_cast<char*>(r.data) + b * r.stride[0] * esize;
  r.shape[0] = 1, r.shape[1] = len;
  return r;
}

TensorRef seq_lse_view(const HostTensor& t, bool packed, int64_t start, int64_t b, int64_t len) {
  TensorRef r = t.ref();
  const int64_t esize = static_cast<int64_t>(dtype_size(r.dtype));
  if (packed) {
    r.data = static_cast<char*>(r.data) + start * r.stride[1] * esize;
    return TensorRef::strided(r.data, r.dtype, {1, r.shape[0], len},
                              {r.shape[0] * r.stride[0], r.stride[0], r.stride[1]});
  }
  r.data = static_cast<char*>(r.data) + b * r.stride[0] * esize;
  r.shape[0] = 1, r.shape[2] = len;
  return r;
}

Errors eager_errors(const Case& c) {
  const Problem& p = c.problem;
  if (!p.varlen()) return measure(run_eager(c), c);
  // Each sequence as a dense batch of one: views of its rows of q, k, v and of the oracle.
  Errors e;
  const std::vector<int64_t> cq = p.packed_q ? prefix_sums(p.lens_q) : std::vector<int64_t>{};
  const std::vector<int64_t> ck = p.packed_k ? prefix_sums(p.lens_k) : std::vector<int64_t>{};
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t lq = p.len_q(b), lk = p.len_k(b);
    if (lq == 0) continue;
    const int64_t q0 = p.packed_q ? cq[b] : 0, k0 = p.packed_k ? ck[b] : 0;
    HostTensor out = HostTensor::contiguous(p.dtype, {1, lq, p.heads_q, p.head_dim});
    HostTensor lse = HostTensor::contiguous(DType::kFloat32, {1, p.heads_q, lq});
    const TensorRef lse_ref = lse.ref();
    if (lk == 0) continue;  // eager has nothing to multiply; ours is held to O = 0 exactly there
    eager(seq_view(c.q, p.packed_q, q0, b, lq), seq_view(c.k, p.packed_k, k0, b, lk),
          seq_view(c.v, p.packed_k, k0, b, lk), out.ref(), &lse_ref, p.options);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        for (int64_t d = 0; d < p.head_dim; ++d) {
          const Index ref_idx = p.packed_q ? Index{q0 + i, h, d, 0} : Index{b, i, h, d};
          fold(out.get({0, i, h, d}), c.ref_out.get(ref_idx), &e.out, &e, "eager out", ref_idx);
        }
        const Index lse_idx = p.packed_q ? Index{h, q0 + i, 0, 0} : Index{b, h, i, 0};
        fold(lse.get({0, h, i, 0}), c.ref_lse.get(lse_idx), &e.lse, &e, "eager lse", lse_idx);
      }
  }
  return e;
}

Atol atol_for(DType dtype, DeviceKind device) {
  // O: a few roundings of a value near 1 in the output dtype (FA3's rule uses the dtype's own
  // rounding error at 0.3 the same way). LSE is fp32 for every dtype, but for 16-bit inputs the
  // reference eager path rounds S to the dtype, so its error sets the bar; atol covers rows
  // where eager happens to be exact. The GPU kernels keep O's rounding tighter than the CPU
  // bound (bf16 2^-10, fp16 2^-13) and compute the LSE with the special-function unit's exp2
  // and log2 (approximations good to ~2^-22 relative), hence 1e-4.
  if (device == DeviceKind::kCUDA) {
    if (dtype == DType::kBFloat16) return {1.0 / 1024, 1e-4};
    if (dtype == DType::kFloat16) return {1.0 / 8192, 1e-4};
  }
  switch (dtype) {
    case DType::kFloat32:
      return {2e-6, 2e-6};
    case DType::kFloat16:
      return {std::ldexp(1.0, -11), 1e-5};
    case DType::kBFloat16:
      return {std::ldexp(1.0, -8), 1e-5};
    case DType::kFloat64:
    case DType::kInt32:
      return {1e-12, 1e-12};
  }
  return {0, 0};
}

bool Report::ok() const {
  return ours.mismatches == 0 && unwritten == 0 && gaps_changed == 0 &&
         ours.out <= 2 * eager.out + atol.out && ours.lse <= 2 * eager.lse + atol.lse;
}

std::string Report::str() const {
  std::ostringstream s;
  s << "O err " << ours.out << " (eager " << eager.out << ", bound " << 2 * eager.out + atol.out
    << "), LSE err " << ours.lse << " (eager " << eager.lse << ", bound " << 2 * eager.lse + atol.lse
    << "), mismatches " << ours.mismatches
    << (ours.first_mismatch.empty() ? "" : " first: " + ours.first_mismatch) << ", unwritten " << unwritten
    << ", stray writes " << gaps_changed;
  return s.str();
}

Report judge(const Result& r, const Case& c, DeviceKind device) {
  Report rep;
  rep.ours = measure(r, c);
  rep.eager = eager_errors(c);
  rep.atol = atol_for(c.problem.dtype, device);
  // Every element the oracle wrote must be written (measure() checks the ones it did not).
  c.ref_out.for_each(
      [&](const Index& idx) { rep.unwritten += !c.ref_out.is_poison(idx) && r.out.is_poison(idx); });
  if (c.problem.with_lse)
    c.ref_lse.for_each(
        [&](const Index& idx) { rep.unwritten += !c.ref_lse.is_poison(idx) && r.lse.is_poison(idx); });
  else
    rep.gaps_changed += r.lse.numel() - r.lse.count_unwritten();  // no LSE asked: none written
  rep.gaps_changed += r.out.count_gaps_changed() + r.lse.count_gaps_changed();
  return rep;
}

void expect_written(const Result& r, const char* what) {
  EXPECT_EQ(r.out.count_unwritten(), 0) << what << ": out elements left unwritten";
  EXPECT_EQ(r.out.count_gaps_changed(), 0) << what << ": out written outside its view";
  EXPECT_EQ(r.lse.count_unwritten(), 0) << what << ": lse elements left unwritten";
  EXPECT_EQ(r.lse.count_gaps_changed(), 0) << what << ": lse written outside its view";
}

void expect_empty_rows_exact(const Result& r, const Case& c) {
  const Problem& p = c.problem;
  int64_t bad = 0;
  for (int64_t i = 0; i < p.seqlen_q; ++i) {
    if (visible_keys(p, i) != 0) continue;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const double lse = r.lse.get({b, h, i, 0});
        if (!(std::isinf(lse) && lse < 0)) {
          if (bad++ < 3)
            ADD_FAILURE() << "empty row b=" << b << " h=" << h << " i=" << i << ": lse = " << lse;
        }
        for (int64_t d = 0; d < p.head_dim; ++d) {
          const double o = r.out.get({b, i, h, d});
          if (o != 0.0 && bad++ < 3)
            ADD_FAILURE() << "empty row b=" << b << " h=" << h << " i=" << i << ": out[" << d << "] = " << o;
        }
      }
  }
}

bool same_bits(const Result& a, const Result& b) {
  return a.out.bytes() == b.out.bytes() && a.lse.bytes() == b.lse.bytes();
}

std::mt19937_64 rng_for(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same seed on every platform
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return std::mt19937_64(h);
}

}  // namespace tileattn::test
