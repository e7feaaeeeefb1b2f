// test_util.cc: the shared test helpers declared in test_util.h.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

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
  for (int d = 0; d < rank(); ++d) {
    // An index outside the shape is a bug of the test: fail loudly, never touch other memory.
    if (idx[d] < 0 || idx[d] >= shape_[d])
      throw std::out_of_range("HostTensor index " + std::to_string(idx[d]) + " in dim " + std::to_string(d) +
                              " outside its size " + std::to_string(shape_[d]));
    pos += idx[d] * stride_[d];
  }
  return pos;
}

double HostTensor::get(const Index& idx) const {
  return element_as_double(bytes_.data(), dtype_, position(idx));
}

void HostTensor::set(const Index& idx, double x) { set_element(bytes_.data(), dtype_, position(idx), x); }

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
  if (o.kernel != Kernel::kAuto) os << "_" << kernel_name(o.kernel);
  if (o.deterministic) os << "_det";
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

}  // namespace tileattn::test
