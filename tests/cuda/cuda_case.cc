// cuda_case.cc: GPU test cases against the fp64 oracle, with eager's error as the yardstick.
#include "cuda_case.h"

#include <cuda_runtime.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/convert.h"

namespace tileattn::cuda_test {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

constexpr uint64_t kSentinel = 0x1357;  // an ordinary finite value in every dtype's low bits

std::vector<int64_t> strides_for(const std::vector<int64_t>& s, Layout layout) {
  if (s.size() == 4) {
    const int64_t L = s[1], H = s[2], D = s[3];
    switch (layout) {
      case Layout::kContiguous:
        return {L * H * D, H * D, D, 1};
      case Layout::kPermuted:
        return {H * L * D, D, L * D, 1};
      case Layout::kPadded: {
        const int64_t dp = D + 8, row = H * dp + 16;
        return {L * row + 32, row, dp, 1};
      }
    }
  }
  const int64_t H = s[1], L = s[2];  // [B, H, L]
  switch (layout) {
    case Layout::kContiguous:
      return {H * L, L, 1};
    case Layout::kPermuted:
      return {L * H, 1, H};
    case Layout::kPadded:
      return {H * (L + 3) + 5, L + 3, 1};
  }
  return {};
}

uint64_t nan_bits(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return 0x7fc0;
    case DType::kFloat16:
      return 0x7e00;
    case DType::kFloat32:
      return 0x7fc00000u;
    case DType::kFloat64:
      return 0x7ff8000000000000ull;
  }
  return 0;
}

const char* layout_name(Layout l) {
  return l == Layout::kContiguous ? "contig" : l == Layout::kPermuted ? "perm" : "padded";
}

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, Layout layout)
    : dtype_(dtype), shape_(std::move(shape)), stride_(strides_for(shape_, layout)) {
  int64_t numel = 1, last = 0;
  for (size_t d = 0; d < shape_.size(); ++d) {
    numel *= shape_[d];
    last += (shape_[d] - 1) * stride_[d];
  }
  storage_ = numel > 0 ? last + 1 : 0;
  host_.assign(static_cast<size_t>(storage_) * dtype_size(dtype_), 0);
  in_view_.assign(static_cast<size_t>(storage_), 0);
  if (numel == 0) return;
  std::vector<int64_t> idx(shape_.size(), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t pos = 0;
    for (size_t d = 0; d < shape_.size(); ++d) pos += idx[d] * stride_[d];
    in_view_[pos] = 1;
    for (int d = static_cast<int>(shape_.size()) - 1; d >= 0 && ++idx[d] == shape_[d]; --d) idx[d] = 0;
  }
}

Tensor::~Tensor() {
  if (device_) (void)cudaFree(device_);
}

TensorRef Tensor::host_ref() {
  TensorRef t;
  t.data = host_.data();
  t.dtype = dtype_;
  t.device = Device::cpu();
  t.rank = static_cast<int>(shape_.size());
  for (int d = 0; d < t.rank; ++d) t.shape[d] = shape_[d], t.stride[d] = stride_[d];
  return t;
}

TensorRef Tensor::device_ref() {
  if (!device_) to_device();
  TensorRef t = host_ref();
  t.data = device_;
  t.device = Device::cuda(0);
  return t;
}

int64_t Tensor::offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
  int64_t pos = i0 * stride_[0] + i1 * stride_[1] + i2 * stride_[2];
  if (shape_.size() == 4) pos += i3 * stride_[3];
  return pos;
}

uint64_t Tensor::raw(int64_t pos) const {
  uint64_t bits = 0;
  std::memcpy(&bits, host_.data() + pos * dtype_size(dtype_), dtype_size(dtype_));
  return bits;
}

void Tensor::set_raw(int64_t pos, uint64_t bits) {
  std::memcpy(host_.data() + pos * dtype_size(dtype_), &bits, dtype_size(dtype_));
}

double Tensor::get(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
  return detail::load_as_double(host_.data(), dtype_, offset(i0, i1, i2, i3));
}

void Tensor::set(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x) {
  detail::store_from_double(host_.data(), dtype_, offset(i0, i1, i2, i3), x);
}

void Tensor::fill_random(std::mt19937_64& rng, double amplitude) {
  std::uniform_real_distribution<double> dist(-amplitude, amplitude);
  for (int64_t pos = 0; pos < storage_; ++pos) {
    if (in_view_[pos])
      detail::store_from_double(host_.data(), dtype_, pos, dist(rng));
    else
      set_raw(pos, nan_bits(dtype_));
  }
}

void Tensor::poison() {
  for (int64_t pos = 0; pos < storage_; ++pos) set_raw(pos, in_view_[pos] ? nan_bits(dtype_) : kSentinel);
}

void Tensor::to_device() {
  if (!device_) check(cudaMalloc(&device_, host_.size() + 16), "cudaMalloc");
  check(cudaMemcpy(device_, host_.data(), host_.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void Tensor::from_device() {
  check(cudaMemcpy(host_.data(), device_, host_.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

int64_t Tensor::gaps_changed() const {
  int64_t n = 0;
  for (int64_t pos = 0; pos < storage_; ++pos) n += !in_view_[pos] && raw(pos) != kSentinel;
  return n;
}

std::string Problem::name() const {
  std::ostringstream s;
  s << dtype_name(dtype) << "_B" << batch << "_Lq" << seqlen_q << "_Lk" << seqlen_k << "_H" << heads_q << "x"
    << heads_kv << "_D" << head_dim;
  if (options.causal) s << "_causal";
  if (options.window_left >= 0 || options.window_right >= 0)
    s << "_win" << options.window_left << "," << options.window_right;
  if (options.softcap > 0) s << "_cap" << options.softcap;
  if (options.scale) s << "_scale" << *options.scale;
  if (options.rescale == Rescale::kAlways) s << "_always";
  if (q_layout != Layout::kContiguous || kv_layout != Layout::kContiguous ||
      out_layout != Layout::kContiguous || lse_layout != Layout::kContiguous)
    s << "_" << layout_name(q_layout) << "-" << layout_name(kv_layout) << "-" << layout_name(out_layout)
      << "-" << layout_name(lse_layout);
  if (!with_lse) s << "_nolse";
  return s.str();
}

std::string Problem::test_name() const {
  std::string s = name();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

double atol_out(DType dtype) { return dtype == DType::kBFloat16 ? 1.0 / 1024 : 1.0 / 8192; }
double atol_lse(DType) { return 1e-4; }

bool Report::ok() const {
  // err(ours) <= 2 err(eager) + atol, for O and for the LSE.
  return mismatches == 0 && gaps_changed == 0 && err_out <= 2 * eager_out + atol_o &&
         err_lse <= 2 * eager_lse + atol_l;
}

std::string Report::str() const {
  std::ostringstream s;
  s << "O err " << err_out << " (eager " << eager_out << ", bound " << 2 * eager_out + atol_o << "), LSE err "
    << err_lse << " (eager " << eager_lse << ", bound " << 2 * eager_lse + atol_l << "), mismatches "
    << mismatches << (first_mismatch.empty() ? "" : " first: " + first_mismatch) << ", stray writes "
    << gaps_changed;
  return s.str();
}

namespace {

// Largest |x - ref| over finite oracle values; non-finite ones must match exactly (NaN = NaN).
void compare(const Tensor& x, const Tensor& ref, int64_t d3, double* err, int64_t* mismatches,
             std::string* first, const char* what) {
  const int64_t n3 = d3 > 0 ? d3 : 1;
  for (int64_t a = 0; a < ref.dim(0); ++a)
    for (int64_t b = 0; b < ref.dim(1); ++b)
      for (int64_t c = 0; c < ref.dim(2); ++c)
        for (int64_t d = 0; d < n3; ++d) {
          const double r = ref.get(a, b, c, d), v = x.get(a, b, c, d);
          bool bad;
          if (std::isnan(r))
            bad = !std::isnan(v);
          else if (!std::isfinite(r))
            bad = v != r;
          else if (!std::isfinite(v))
            bad = true;
          else {
            *err = std::max(*err, std::abs(v - r));
            bad = false;
          }
          if (bad && mismatches) {
            if ((*mismatches)++ == 0) {
              std::ostringstream s;
              s << what << "[" << a << "," << b << "," << c << "," << d << "] = " << v << ", oracle " << r;
              *first = s.str();
            }
          }
        }
}

}  // namespace

Report run_case(const Problem& p, uint64_t seed, int64_t nan_at_key, const GpuRunner& runner) {
  const int64_t B = p.batch, Lq = p.seqlen_q, Lk = p.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv,
                D = p.head_dim;
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(Lq * 131 + Lk * 17 + D));
  Tensor q(p.dtype, {B, Lq, Hq, D}, p.q_layout), k(p.dtype, {B, Lk, Hkv, D}, p.kv_layout),
      v(p.dtype, {B, Lk, Hkv, D}, p.kv_layout);
  q.fill_random(rng, p.q_amplitude);
  k.fill_random(rng, 1.0);
  v.fill_random(rng, 1.0);
  if (nan_at_key >= 0) k.set(0, nan_at_key, 0, 0, std::numeric_limits<double>::quiet_NaN());

  Tensor out(p.dtype, {B, Lq, Hq, D}, p.out_layout), lse(DType::kFloat32, {B, Hq, Lq}, p.lse_layout);
  out.poison();
  lse.poison();
  TensorRef d_lse = lse.device_ref();
  (runner ? runner : GpuRunner(forward))(q.device_ref(), k.device_ref(), v.device_ref(), out.device_ref(),
                                         p.with_lse ? &d_lse : nullptr, p.options);
  if (p.options.cuda_stream)
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(p.options.cuda_stream)), "stream sync");
  check(cudaDeviceSynchronize(), "kernel");
  out.from_device();
  lse.from_device();

  Options cpu = p.options;
  cpu.cuda_stream = nullptr;
  cpu.kernel = Kernel::kAuto;
  Tensor ref_out(DType::kFloat64, {B, Lq, Hq, D}, Layout::kContiguous),
      ref_lse(DType::kFloat64, {B, Hq, Lq}, Layout::kContiguous);
  TensorRef r_lse = ref_lse.host_ref();
  reference(q.host_ref(), k.host_ref(), v.host_ref(), ref_out.host_ref(), &r_lse, cpu);
  Tensor e_out(p.dtype, {B, Lq, Hq, D}, Layout::kContiguous),
      e_lse(DType::kFloat32, {B, Hq, Lq}, Layout::kContiguous);
  TensorRef el = e_lse.host_ref();
  eager(q.host_ref(), k.host_ref(), v.host_ref(), e_out.host_ref(), &el, cpu);

  Report r;
  r.atol_o = atol_out(p.dtype);
  r.atol_l = atol_lse(p.dtype);
  compare(out, ref_out, D, &r.err_out, &r.mismatches, &r.first_mismatch, "out");
  if (p.with_lse) compare(lse, ref_lse, 0, &r.err_lse, &r.mismatches, &r.first_mismatch, "lse");
  compare(e_out, ref_out, D, &r.eager_out, nullptr, nullptr, "eager out");
  compare(e_lse, ref_lse, 0, &r.eager_lse, nullptr, nullptr, "eager lse");
  r.gaps_changed = out.gaps_changed() + (p.with_lse ? lse.gaps_changed() : 0);
  if (!p.with_lse) {  // nothing may have touched the LSE buffer
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Lq; ++i)
          if (!std::isnan(lse.get(b, h, i))) ++r.gaps_changed;
  }
  return r;
}

}  // namespace tileattn::cuda_test
