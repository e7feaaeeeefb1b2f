// select.h: pure kernel selection, (problem, device, request) -> kernel or the reason it can't run.
#pragma once

#include <string>

#include "common/params.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn::detail {

// What the tensors' device can do; filled by the caller, so selection itself queries nothing.
struct DeviceCaps {
  DeviceKind kind = DeviceKind::kCPU;
  bool cuda_built = false;         // the CUDA kernels are compiled into this library
  int device_count = 0;            // CUDA devices present
  int cc_major = 0, cc_minor = 0;  // compute capability of the tensors' device
  bool sm90_built = false;         // the sm90a kernels are compiled in
};

struct Selection {
  Kernel kernel = Kernel::kAuto;  // kAuto = none: see argument and reason
  std::string argument;           // which argument made it impossible
  std::string reason;
  bool ok() const { return kernel != Kernel::kAuto; }
};

Selection select_kernel(const AttnParams& p, const DeviceCaps& caps, Kernel requested);

// Why a CUDA kernel cannot run p, and the argument at fault ("k" for its strides; "q" for the
// problem's shape or dtype). An empty reason: it can.
struct Rejection {
  std::string argument, reason;
  bool ok() const { return reason.empty(); }
};

// Shape/feature checks of a CUDA kernel (defined with the CUDA limits).
Rejection cuda_kernel_rejects(const AttnParams& p, Kernel kernel);
// What the CUDA backward needs of its own tensors (dout, dq, dk, dv, dlse) and grids, on top of
// what the forward's kernel selection checks of the forward's.
Rejection cuda_backward_rejects(const BackwardParams& b);
// Whether sm90 would gather a paged cache with cp.async instead of TMA boxes (see cuda_limits.cc).
bool sm90_gathers(const AttnParams& p);
// Why the sm90 backward cannot run b (on top of the above and an sm90-capable selection).
Rejection sm90_backward_rejects(const BackwardParams& b);
// Whether Kernel::kAuto runs the sm90 backward: wherever it can (measured ahead of the sm80
// kernels at every shape timed: cuda_limits.cc, docs/kernels/sm90_backward.md "The backward").
bool sm90_backward_preferred(const BackwardParams& b);

}  // namespace tileattn::detail
