// test_util.cc: the shared test helpers declared in test_util.h.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace tileattn::test {
namespace {

// Bit patterns: the poison is a quiet NaN with a payload no computation produces, so "still
// poisoned" is told apart from "written with NaN"; the sentinel is an ordinary finite number.
uint64_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0x7fe5a5a5u;
    case DType::kFloat16:
      return 0x7e5au;
    case DType::kBFloat16:
      return 0x7fe5u;
    case DType::kFloat64:
      return 0x7ffca5a5a5a5a5a5ull;
    case DType::kInt32:
      return 0x7fe5a5a5u;
  }
  return 0;
}

uint64_t sentinel_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0x4b1d1d1du;
    case DType::kFloat16:
      return 0x5a5au;
    case DType::kBFloat16:
      return 0x4b1du;
    case DType::kFloat64:
      return 0x40c3881d1d1d1d1dull;
    case DType::kInt32:
      return 0x4b1d1d1du;
  }
  return 0;
}

std::string number_name(double x) {
  std::ostringstream os;
  os << x;
  std::string s = os.str();
  for (char& ch : s) {
    if (ch == '.') ch = 'p';
    if (ch == '-') ch = 'm';
    if (ch == '+') ch = 'P';
  }
  return s;
}

std::string window_name(int64_t x) { return x < 0 ? "inf" : std::to_string(x); }

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kContiguous:
      return "blhd";
    case Layout::kBHLD:
      return "bhld";
    case Layout::kStrided:
      return "strided";
    case Layout::kPadded:
      return "padded";
    case Layout::kAligned:
      return "aligned";
  }
  return "?";
}

const char* lse_layout_name(LseLayout layout) {
  switch (layout) {
    case LseLayout::kContiguous:
      return "bhl";
    case LseLayout::kPadded:
      return "padded";
    case LseLayout::kBLH:
      return "blh";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// HostTensor

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> stride, int64_t guard)
    : dtype_(dtype), shape_(std::move(shape)), stride_(std::move(stride)) {
  int64_t last = 0;
  const bool empty = numel() == 0;
  if (!empty)
    for (size_t d = 0; d < shape_.size(); ++d) last += (shape_[d] - 1) * stride_[d];
  base_ = guard;
  const int64_t elements = guard + (empty ? 0 : last + 1) + guard;
  bytes_.assign(static_cast<size_t>(elements) * dtype_size(dtype_), std::byte{0});
  in_view_.assign(elements, 0);
  for_each([&](const Index& idx) { in_view_[position(idx)] = 1; });
}

HostTensor HostTensor::contiguous(DType dtype, std::vector<int64_t> shape, int64_t guard) {
  std::vector<int64_t> stride(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape[d];
  }
  return HostTensor(dtype, std::move(shape), std::move(stride), guard);
}

HostTensor HostTensor::blhd(DType dtype, int64_t B, int64_t L, int64_t H, int64_t D, Layout layout) {
  switch (layout) {
    case Layout::kContiguous:
      return contiguous(dtype, {B, L, H, D});
    case Layout::kBHLD: {
      // Storage is [B, H, L, D]; the argument is its permuted view, exactly as a caller builds it.
      const TensorRef view = TensorRef::contiguous(nullptr, dtype, {B, H, L, D}).permuted({0, 2, 1, 3});
      return HostTensor(dtype, {B, L, H, D},
                        {view.stride[0], view.stride[1], view.stride[2], view.stride[3]});
    }
    case Layout::kStrided: {
      const int64_t sd = 2, sh = 2 * D + 1, sl = H * sh + 3, sb = L * sl + 5;
      return HostTensor(dtype, {B, L, H, D}, {sb, sl, sh, sd});
    }
    case Layout::kPadded: {
      const int64_t sd = 1, sh = D + 3, sl = H * sh + 2, sb = L * sl + 7;
      return HostTensor(dtype, {B, L, H, D}, {sb, sl, sh, sd});
    }
    case Layout::kAligned: {
      const int64_t sd = 1, sh = (D + 7) / 8 * 8 + 8, sl = H * sh + 16, sb = L * sl + 32;
      return HostTensor(dtype, {B, L, H, D}, {sb, sl, sh, sd});
    }
  }
  return {};
}

HostTensor HostTensor::bhl(DType dtype, int64_t B, int64_t H, int64_t L, LseLayout layout) {
  switch (layout) {
    case LseLayout::kContiguous:
      return contiguous(dtype, {B, H, L});
    case LseLayout::kPadded: {
      const int64_t sl = 1, sh = L + 3, sb = H * sh + 1;
      return HostTensor(dtype, {B, H, L}, {sb, sh, sl});
    }
    case LseLayout::kBLH: {
      const TensorRef view = TensorRef::contiguous(nullptr, dtype, {B, L, H}).permuted({0, 2, 1});
      return HostTensor(dtype, {B, H, L}, {view.stride[0], view.stride[1], view.stride[2]});
    }
  }
  return {};
}

TensorRef HostTensor::ref() const {
  TensorRef t;
  t.data = const_cast<std::byte*>(bytes_.data()) + base_ * static_cast<int64_t>(dtype_size(dtype_));
  t.dtype = dtype_;
  t.device = Device::cpu();
  t.rank = rank();
  for (int d = 0; d < rank(); ++d) {
    t.shape[d] = shape_[d];
    t.stride[d] = stride_[d];
  }
  return t;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int64_t HostTensor::position(const Index& idx) const {
  int64_t pos = base_;
  for (int d = 0; d < rank(); ++d) pos += idx[d] * stride_[d];
  return pos;
}

double HostTensor::get(const Index& idx) const {
  return element_as_double(bytes_.data(), dtype_, position(idx));
}

void HostTensor::set(const Index& idx, double x) {
  set_element(bytes_.data(), dtype_, position(idx), x);
}

uint64_t HostTensor::bits_at(int64_t pos) const {
  uint64_t bits = 0;
  std::memcpy(&bits, bytes_.data() + pos * dtype_size(dtype_), dtype_size(dtype_));  // little endian
  return bits;
}

void HostTensor::for_each(const std::function<void(const Index&)>& f) const {
  if (numel() == 0) return;
  Index n{1, 1, 1, 1};
  for (int d = 0; d < rank(); ++d) n[d] = shape_[d];
  Index idx{};
  for (idx[0] = 0; idx[0] < n[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < n[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < n[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < n[3]; ++idx[3]) f(idx);
}

void HostTensor::fill_normal(std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> normal(0.0, stddev);
  for (size_t pos = 0; pos < in_view_.size(); ++pos)
    if (!in_view_[pos])
      set_element(bytes_.data(), dtype_, static_cast<int64_t>(pos), std::numeric_limits<double>::quiet_NaN());
  for_each([&](const Index& idx) {
    do set(idx, normal(rng));
    while (get(idx) == 0.0);  // never zero, even after rounding to the dtype
  });
}

void HostTensor::poison() {
  const size_t esize = dtype_size(dtype_);
  const uint64_t poison = poison_bits(dtype_), sentinel = sentinel_bits(dtype_);
  for (size_t pos = 0; pos < in_view_.size(); ++pos)
    std::memcpy(bytes_.data() + pos * esize, in_view_[pos] ? &poison : &sentinel, esize);
}

int64_t HostTensor::count_unwritten() const {
  int64_t n = 0;
  const uint64_t poison = poison_bits(dtype_);
  for (size_t pos = 0; pos < in_view_.size(); ++pos) n += in_view_[pos] && bits_at(pos) == poison;
  return n;
}

bool HostTensor::is_poison(const Index& idx) const { return bits_at(position(idx)) == poison_bits(dtype_); }

int64_t HostTensor::count_gaps_changed() const {
  int64_t n = 0;
  const uint64_t sentinel = sentinel_bits(dtype_);
  for (size_t pos = 0; pos < in_view_.size(); ++pos) n += !in_view_[pos] && bits_at(pos) != sentinel;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Problem

int64_t Problem::len_q(int64_t b) const {
  if (!used_q.empty()) return used_q[b];
  return packed_q ? lens_q[b] : seqlen_q;
}

int64_t Problem::len_k(int64_t b) const {
  if (!used_k.empty()) return used_k[b];
  return packed_k ? lens_k[b] : seqlen_k;
}

Problem varlen_problem(Problem p, std::vector<int64_t> lens_q, std::vector<int64_t> lens_k) {
  p.packed_q = p.packed_k = true;
  p.batch = static_cast<int64_t>(lens_q.size());
  p.seqlen_q = p.seqlen_k = 0;
  for (int64_t x : lens_q) p.seqlen_q = std::max(p.seqlen_q, x);
  for (int64_t x : lens_k) p.seqlen_k = std::max(p.seqlen_k, x);
  p.lens_q = std::move(lens_q);
  p.lens_k = std::move(lens_k);
  return p;
}

std::string Problem::name() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "_B" << batch << "_Lq" << seqlen_q << "_Lk" << seqlen_k << "_H" << heads_q << "x"
     << heads_kv << "_D" << head_dim;
  const Options& o = options;
  if (o.causal) os << "_causal";
  if (o.window_left >= 0 || o.window_right >= 0)
    os << "_winL" << window_name(o.window_left) << "R" << window_name(o.window_right);
  if (o.softcap > 0) os << "_cap" << number_name(o.softcap);
  if (o.scale) os << "_scale" << number_name(*o.scale);
  if (o.rescale == Rescale::kAlways) os << "_always";
  if (o.num_threads > 0) os << "_t" << o.num_threads;
  if (q_layout != Layout::kContiguous) os << "_q" << layout_name(q_layout);
  if (kv_layout != Layout::kContiguous) os << "_kv" << layout_name(kv_layout);
  if (out_layout != Layout::kContiguous) os << "_o" << layout_name(out_layout);
  if (lse_layout != LseLayout::kContiguous) os << "_lse" << lse_layout_name(lse_layout);
  if (input_stddev != 1.0) os << "_sd" << number_name(input_stddev);
  if (!with_lse) os << "_nolse";
  if (o.num_splits > 0) os << "_splits" << o.num_splits;
  int64_t total_q = 0, total_k = 0;
  for (int64_t x : lens_q) total_q += x;
  for (int64_t x : lens_k) total_k += x;
  if (packed_q) os << "_packq" << total_q;
  if (packed_k) os << "_packk" << total_k;
  if (!used_q.empty()) os << "_usedq";
  if (!used_k.empty()) os << "_usedk";
  return os.str();
}

bool sees(const Problem& p, int64_t i, int64_t j, int64_t b) {
  const int64_t lq = p.len_q(b), lk = p.len_k(b);
  if (j < 0 || j >= lk) return false;
  const int64_t pos = i + (lk - lq);  // bottom-right alignment
  const int64_t left = p.options.window_left;
  const int64_t right = p.options.causal ? 0 : p.options.window_right;
  if (left >= 0 && j < pos - left) return false;
  if (right >= 0 && j > pos + right) return false;
  return true;
}

int64_t visible_keys(const Problem& p, int64_t i, int64_t b) {
  int64_t n = 0;
  for (int64_t j = 0; j < p.len_k(b); ++j) n += sees(p, i, j, b);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Runs

namespace {

int64_t total(const std::vector<int64_t>& lens) {
  int64_t t = 0;
  for (int64_t x : lens) t += x;
  return t;
}

// An int32 index tensor holding `values` (empty: none).
HostTensor index_tensor(const std::vector<int64_t>& values) {
  HostTensor t = HostTensor::contiguous(DType::kInt32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set({static_cast<int64_t>(i), 0, 0, 0}, static_cast<double>(values[i]));
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

// Sets the rows of t (q, k or v) that do not count to NaN: they must not reach any result.
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

}  // namespace

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

Seqlens Case::seqlens(const std::function<TensorRef(const HostTensor&)>& view, std::array<TensorRef, 4>* refs) const {
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
  reference_varlen(q.ref(), k.ref(), v.ref(), ref_out.ref(), &lse, seqlens([](const HostTensor& t) { return t.ref(); }, &refs),
                   problem.options);
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

Result run_forward(const Case& c) { return run_forward(c, c.problem.options); }

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
          os << what << "[" << idx[0] << ", " << idx[1] << ", " << idx[2] << ", " << idx[3] << "] = " << ours.get(idx)
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

Errors eager_errors(const Case& c) {
  const Problem& p = c.problem;
  if (!p.varlen()) return measure(run_eager(c), c);
  // Each sequence as a dense batch of one: views of its rows of q, k, v and of the oracle.
  Errors e;
  const std::vector<int64_t> cq = p.packed_q ? prefix_sums(p.lens_q) : std::vector<int64_t>{};
  const std::vector<int64_t> ck = p.packed_k ? prefix_sums(p.lens_k) : std::vector<int64_t>{};
  const auto seq_view = [](const HostTensor& t, bool packed, int64_t start, int64_t b, int64_t len) {
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
  };
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t lq = p.len_q(b), lk = p.len_k(b);
    if (lq == 0) continue;
    const int64_t q0 = p.packed_q ? cq[b] : 0, k0 = p.packed_k ? ck[b] : 0;
    HostTensor out = HostTensor::contiguous(p.dtype, {1, lq, p.heads_q, p.head_dim});
    HostTensor lse = HostTensor::contiguous(DType::kFloat32, {1, p.heads_q, lq});
    const TensorRef lse_ref = lse.ref();
    if (lk == 0) continue;  // eager has nothing to multiply; ours is held to O = 0 exactly there
    eager(seq_view(c.q, p.packed_q, q0, b, lq), seq_view(c.k, p.packed_k, k0, b, lk), seq_view(c.v, p.packed_k, k0, b, lk),
          out.ref(), &lse_ref, p.options);
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
  return ours.mismatches == 0 && unwritten == 0 && gaps_changed == 0 && ours.out <= 2 * eager.out + atol.out &&
         ours.lse <= 2 * eager.lse + atol.lse;
}

std::string Report::str() const {
  std::ostringstream s;
  s << "O err " << ours.out << " (eager " << eager.out << ", bound " << 2 * eager.out + atol.out << "), LSE err "
    << ours.lse << " (eager " << eager.lse << ", bound " << 2 * eager.lse + atol.lse << "), mismatches "
    << ours.mismatches << (ours.first_mismatch.empty() ? "" : " first: " + ours.first_mismatch) << ", unwritten "
    << unwritten << ", stray writes " << gaps_changed;
  return s.str();
}

Report judge(const Result& r, const Case& c, DeviceKind device) {
  Report rep;
  rep.ours = measure(r, c);
  rep.eager = eager_errors(c);
  rep.atol = atol_for(c.problem.dtype, device);
  // Every element the oracle wrote must be written (measure() checks the ones it did not).
  c.ref_out.for_each([&](const Index& idx) { rep.unwritten += !c.ref_out.is_poison(idx) && r.out.is_poison(idx); });
  if (c.problem.with_lse)
    c.ref_lse.for_each([&](const Index& idx) { rep.unwritten += !c.ref_lse.is_poison(idx) && r.lse.is_poison(idx); });
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
