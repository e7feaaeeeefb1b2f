// cuda_case.h: the GPU side of the test harness (tests/test_util.h, shared with the CPU suite):
// a case's tensors mirrored on the device, forward() run there, the result judged by the same
// rule and tolerance table as on the CPU.
#pragma once

#include <cstdint>
#include <functional>

#include "backward_util.h"
#include "test_util.h"

namespace tileattn::cuda_test {

using test::Case;
using test::HostTensor;
using test::Layout;
using test::LseLayout;
using test::Problem;
using test::Report;
using test::Result;

// A host tensor's whole storage (guards and gaps included) in device memory: ref() is the same
// view there, so stray writes still land in gaps the host can check after to_host().
class DeviceCopy {
 public:
  explicit DeviceCopy(const HostTensor& t);
  ~DeviceCopy();
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  TensorRef ref() const;
  void to_host(HostTensor& t) const;
  void from_host() const;  // the host tensor's storage copied to the device again

 private:
  const HostTensor& host_;
  void* device_ = nullptr;
};

// What runs a dense problem on the GPU: forward() unless a test passes another (a kernel config
// the library does not select, a graph capture), with forward()'s arguments.
using GpuRunner = std::function<void(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                     const TensorRef& out, const TensorRef* lse, const Options& options)>;

// c's inputs on the device, fresh poisoned outputs, forward (forward_varlen for varlen cases, in
// checked mode) on the GPU, the outputs back on the host.
Result run_on_gpu(const Case& c, const Options& options, const GpuRunner& runner = {});

// A case of p (seeded), optionally a NaN in key nan_at_key of (batch 0, kv head 0), run on the
// GPU and judged against the oracle with eager's error on the CPU as the yardstick.
Report run_case(const Problem& p, uint64_t seed = 1, int64_t nan_at_key = -1, const GpuRunner& runner = {});

// Whether the sm90 kernels run here (a Hopper and a build with them); else why not.
bool sm90_available();
std::string sm90_unavailable_reason();

// The backward of a case on the GPU: its inputs, forward results, gradients (poisoned) and index
// tensors mirrored on the device (varlen in checked mode), the gradients back on the host.
test::Grads gpu_backward(const test::BackwardCase& bc, const Options& options);
// The same, `runs` times into the same device buffers (poisoned once), each run's gradients
// passed to `each`; the last run's are returned.
test::Grads gpu_backward_runs(const test::BackwardCase& bc, const Options& options, int runs,
                              const std::function<void(int, const test::Grads&)>& each);

}  // namespace tileattn::cuda_test
