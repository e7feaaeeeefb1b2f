// problem.h: one attention problem's tensors (inputs on host and device, outputs) and its timed runs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "buffer.h"
#include "shape.h"
#include "tileattn/tileattn.h"

namespace tileattn::cli {

enum class Impl { kTiled, kEager };
const char* impl_name(Impl impl);  // "tiled", "eager"

// Q [B, Lq, Hq, D], K and V [B, Lk, Hkv, D] filled with normal values, O [B, Lq, Hq, D] and LSE
// [B, Hq, Lq] (fp32) on `device`; host copies of the inputs feed the fp64 oracle.
class AttentionData {
 public:
  AttentionData(const Shape& shape, DType dtype, Device device, uint64_t seed);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  TensorRef q() const;
  TensorRef k() const;
  TensorRef v() const;
  TensorRef out() const;
  TensorRef lse() const;
  TensorRef host_q() const;
  TensorRef host_k() const;
  TensorRef host_v() const;

  void poison_outputs();       // O and LSE all NaN, so an element never written shows
  Buffer out_on_host() const;  // copies of O and LSE on the host (the same buffers' data on CPU)
  Buffer lse_on_host() const;

 private:
  Shape shape_;
  DType dtype_;
  Device device_;
  Buffer host_q_, host_k_, host_v_;
  Buffer dev_q_, dev_k_, dev_v_;  // empty when the device is the CPU
  Buffer out_, lse_;
};

// Runs one implementation once into data's O and LSE, or O alone without with_lse (eager
// reports its S and P bytes).
void run_impl(Impl impl, const AttentionData& data, const Options& options, EagerStats* stats = nullptr,
              bool with_lse = true);

// Wall time of one call in ms (steady_clock), for CPU runs.
double time_call(const std::function<void()>& fn);

struct Timing {
  std::vector<double> ms;  // every timed repetition
  double median() const;
  double min() const;
};

// `warmup` untimed calls of `call`, then `reps` timed ones: on the CPU one by one, on a GPU by
// gpu::time_series_ms (L2 flushed before each call, no wait between calls).
Timing time_calls(Device device, int warmup, int reps, const std::function<void()>& call);
// time_calls of run_impl.
Timing time_impl(Impl impl, const AttentionData& data, const Options& options, int warmup, int reps,
                 bool with_lse = true);

// A backward's tensors: dout (random normal, from the seed) on the host and on data's device
// (the same buffer on the CPU), and dq, dk, dv on data's device.
struct GradBuffers {
  GradBuffers(const AttentionData& data, uint64_t seed);
  void poison();  // dq, dk and dv all NaN, so an element never written shows
  // A buffer as a [B, Lq, Hq, D] (q_view: dout, dq) or [B, Lk, Hkv, D] (k_view: dk, dv) tensor.
  TensorRef q_view(const Buffer& b) const;
  TensorRef k_view(const Buffer& b) const;
  const Buffer& device_dout() const { return dout.data() ? dout : host_dout; }
  Shape shape;
  Buffer host_dout, dout, dq, dk, dv;  // dout empty on the CPU
};

// Whether backward() takes data's and g's tensors under options, and the kernel it would run.
Support backward_support(const AttentionData& data, const GradBuffers& g, const Options& options);
// One call into g's dq, dk and dv from data's O and LSE: backward() (tiled) or eager_backward()
// (eager: CPU tensors only, O and LSE unread).
void run_backward(Impl impl, const AttentionData& data, const GradBuffers& g, const Options& options);
// forward() (tiled, with its LSE) once into data's O and LSE where the backward reads them, then
// `warmup` untimed and `reps` timed calls of run_backward, timed as time_impl times the forward.
Timing time_backward(Impl impl, const AttentionData& data, const GradBuffers& grads, const Options& options,
                     int warmup, int reps);

// Why eager_backward() (CPU) cannot run here: its fp32 S, P and dS of one (batch, head) would not
// fit in the host memory available now; or nothing.
std::optional<std::string> eager_backward_wont_fit(const Shape& shape);

// Why eager cannot run here (its S and P would not fit in the memory available now), or nothing.
std::optional<std::string> eager_wont_fit(const Shape& shape, DType dtype, Device device);

// "fp32" -> DType::kFloat32, for fp32, fp16, bf16.
DType parse_dtype(const std::string& name);

}  // namespace tileattn::cli
