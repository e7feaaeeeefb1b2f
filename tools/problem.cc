// problem.cc: allocation, fills, runs and timing of one attention problem.
#include "problem.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "gpu_runtime.h"
#include "io_model.h"
#include "machine.h"
#include "table.h"

namespace tileattn::cli {
namespace {

// Seeds of Q, K and V derive from the user's seed so that the three never coincide.
constexpr uint64_t kSeedStride = 0x51ed2701;

}  // namespace

const char* impl_name(Impl impl) { return impl == Impl::kTiled ? "tiled" : "eager"; }

AttentionData::AttentionData(const Shape& s, DType dtype, Device device, uint64_t seed)
    : shape_(s),
      dtype_(dtype),
      device_(device),
      host_q_(dtype, s.batch * s.seqlen_q * s.heads_q * s.head_dim),
      host_k_(dtype, s.batch * s.seqlen_k * s.heads_kv * s.head_dim),
      host_v_(dtype, s.batch * s.seqlen_k * s.heads_kv * s.head_dim),
      out_(dtype, s.batch * s.seqlen_q * s.heads_q * s.head_dim, device),
      lse_(DType::kFloat32, s.batch * s.heads_q * s.seqlen_q, device) {
  host_q_.fill_normal(seed);
  host_k_.fill_normal(seed + kSeedStride);
  host_v_.fill_normal(seed + 2 * kSeedStride);
  if (device.kind != DeviceKind::kCPU) {
    dev_q_ = copy_to(host_q_, device);
    dev_k_ = copy_to(host_k_, device);
    dev_v_ = copy_to(host_v_, device);
  }
}

TensorRef AttentionData::host_q() const {
  return host_q_.view({shape_.batch, shape_.seqlen_q, shape_.heads_q, shape_.head_dim});
}
TensorRef AttentionData::host_k() const {
  return host_k_.view({shape_.batch, shape_.seqlen_k, shape_.heads_kv, shape_.head_dim});
}
TensorRef AttentionData::host_v() const {
  return host_v_.view({shape_.batch, shape_.seqlen_k, shape_.heads_kv, shape_.head_dim});
}

TensorRef AttentionData::q() const {
  if (!dev_q_.data()) return host_q();
  return dev_q_.view({shape_.batch, shape_.seqlen_q, shape_.heads_q, shape_.head_dim});
}
TensorRef AttentionData::k() const {
  if (!dev_k_.data()) return host_k();
  return dev_k_.view({shape_.batch, shape_.seqlen_k, shape_.heads_kv, shape_.head_dim});
}
TensorRef AttentionData::v() const {
  if (!dev_v_.data()) return host_v();
  return dev_v_.view({shape_.batch, shape_.seqlen_k, shape_.heads_kv, shape_.head_dim});
}
TensorRef AttentionData::out() const {
  return out_.view({shape_.batch, shape_.seqlen_q, shape_.heads_q, shape_.head_dim});
}
TensorRef AttentionData::lse() const { return lse_.view({shape_.batch, shape_.heads_q, shape_.seqlen_q}); }

namespace {
void poison(Buffer& dst) {  // all NaN, so an element never written shows
  if (dst.on_cpu()) {
    dst.fill(NAN);
  } else {
    Buffer nan(dst.dtype(), dst.numel());
    nan.fill(NAN);
    dst.copy_from(nan);
  }
}
}  // namespace

void AttentionData::poison_outputs() {
  poison(out_);
  poison(lse_);
}

Buffer AttentionData::out_on_host() const { return copy_to(out_, Device::cpu()); }
Buffer AttentionData::lse_on_host() const { return copy_to(lse_, Device::cpu()); }

void run_impl(Impl impl, const AttentionData& data, const Options& options, EagerStats* stats,
              bool with_lse) {
  const TensorRef lse = data.lse();
  const TensorRef* lse_ptr = with_lse ? &lse : nullptr;
  if (impl == Impl::kTiled)
    forward(data.q(), data.k(), data.v(), data.out(), lse_ptr, options);
  else
    eager(data.q(), data.k(), data.v(), data.out(), lse_ptr, options, stats);
}

double time_call(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

double Timing::median() const {
  if (ms.empty()) return NAN;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double Timing::min() const { return ms.empty() ? NAN : *std::min_element(ms.begin(), ms.end()); }

Timing time_calls(Device device, int warmup, int reps, const std::function<void()>& call) {
  for (int i = 0; i < warmup; ++i) call();
  Timing timing;
  if (device.kind != DeviceKind::kCPU) {
    timing.ms = gpu::time_series_ms(device.index, call, reps);
  } else {
    for (int i = 0; i < reps; ++i) timing.ms.push_back(time_call(call));
  }
  return timing;
}

Timing time_impl(Impl impl, const AttentionData& data, const Options& options, int warmup, int reps,
                 bool with_lse) {
  return time_calls(data.device(), warmup, reps, [&] { run_impl(impl, data, options, nullptr, with_lse); });
}

GradBuffers::GradBuffers(const AttentionData& data, uint64_t seed)
    : shape(data.shape()),
      host_dout(data.dtype(), data.out().numel()),
      dq(data.dtype(), data.out().numel(), data.device()),
      dk(data.dtype(), data.k().numel(), data.device()),
      dv(data.dtype(), data.k().numel(), data.device()) {
  host_dout.fill_normal(seed + 3 * kSeedStride);
  if (data.device().kind != DeviceKind::kCPU) dout = copy_to(host_dout, data.device());
}

void GradBuffers::poison() {
  for (Buffer* b : {&dq, &dk, &dv}) cli::poison(*b);
}

TensorRef GradBuffers::q_view(const Buffer& b) const {
  return b.view({shape.batch, shape.seqlen_q, shape.heads_q, shape.head_dim});
}
TensorRef GradBuffers::k_view(const Buffer& b) const {
  return b.view({shape.batch, shape.seqlen_k, shape.heads_kv, shape.head_dim});
}

Support backward_support(const AttentionData& data, const GradBuffers& g, const Options& options) {
  return supported_backward(g.q_view(g.device_dout()), data.q(), data.k(), data.v(), data.out(), data.lse(),
                            g.q_view(g.dq), g.k_view(g.dk), g.k_view(g.dv), options);
}

void run_backward(Impl impl, const AttentionData& data, const GradBuffers& g, const Options& options) {
  if (impl == Impl::kTiled)
    backward(g.q_view(g.device_dout()), data.q(), data.k(), data.v(), data.out(), data.lse(), g.q_view(g.dq),
             g.k_view(g.dk), g.k_view(g.dv), options);
  else
    eager_backward(g.q_view(g.device_dout()), data.q(), data.k(), data.v(), g.q_view(g.dq), g.k_view(g.dk),
                   g.k_view(g.dv), options);
}

Timing time_backward(Impl impl, const AttentionData& data, const GradBuffers& g, const Options& options,
                     int warmup, int reps) {
  if (impl == Impl::kTiled) run_impl(Impl::kTiled, data, options);  // out and lse, as training keeps them
  return time_calls(data.device(), warmup, reps, [&] { run_backward(impl, data, g, options); });
}

namespace {
// Linux overcommits: a too-large S and P would be allocated fine and then killed while being
// written, so the tool checks first and keeps a fifth of what is free as margin.
std::optional<std::string> wont_fit(int64_t need, int64_t have, const std::string& what) {
  if (have <= 0 || static_cast<double>(need) <= 0.8 * static_cast<double>(have)) return std::nullopt;
  return what + " needs " + format_bytes(need) + ", " + format_bytes(have) + " is free";
}
}  // namespace

std::optional<std::string> eager_backward_wont_fit(const Shape& shape) {
  // fp32 S, P and dS of one (batch, head) at a time.
  return wont_fit(3 * shape.seqlen_q * shape.seqlen_k * 4, available_host_memory(),
                  "eager_backward (S, P and dS)");
}

std::optional<std::string> eager_wont_fit(const Shape& shape, DType dtype, Device device) {
  const int64_t have = device.kind == DeviceKind::kCPU ? available_host_memory()
                                                       : static_cast<int64_t>(gpu::free_bytes(device.index));
  return wont_fit(eager_extra_bytes(shape, dtype), have, "eager (S and P)");
}

DType parse_dtype(const std::string& name) {
  if (name == "fp16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  return DType::kFloat32;
}

}  // namespace tileattn::cli
