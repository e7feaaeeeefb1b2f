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
  bool cuda_built = false;  // the CUDA kernels are compiled into this library
  int device_count = 0;     // CUDA devices present
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

// Shape/feature checks of a CUDA kernel; empty when it can run p (defined with the CUDA limits).
// A reason about one tensor starts with its name and ": " ("k: strides ..."), which selection
// turns into the error's argument.
std::string cuda_kernel_rejects(const AttnParams& p, Kernel kernel);

}  // namespace tileattn::detail
