// select.cc: kernel selection. No I/O, no device queries: everything arrives in the arguments.
#include "dispatch/select.h"

#include "dispatch/limits.h"

namespace tileattn::detail {
namespace {

Selection none(std::string argument, std::string reason) {
  return Selection{Kernel::kAuto, std::move(argument), std::move(reason)};
}

std::string cpu_rejects(const AttnParams& p) {
  if (p.head_dim > kCpuMaxHeadDim)
    return "head_dim " + std::to_string(p.head_dim) + " exceeds the CPU limit of " +
           std::to_string(kCpuMaxHeadDim);
  return {};
}

}  // namespace

Selection select_kernel(const AttnParams& p, const DeviceCaps& caps, Kernel requested) {
  if (caps.kind == DeviceKind::kCPU) {
    if (requested != Kernel::kAuto && requested != Kernel::kCpuTiled)
      return none("options.kernel",
                  std::string(kernel_name(requested)) + " runs on CUDA tensors, but q is on the CPU");
    if (auto why = cpu_rejects(p); !why.empty()) return none("q", why);
    return Selection{Kernel::kCpuTiled, {}, {}};
  }
  // CUDA tensors.
  const std::string dev = "cuda:" + std::to_string(p.device_index);
  if (!caps.cuda_built) return none("q", "is on " + dev + ", but this build of tileattn has no CUDA kernels");
  if (p.device_index >= caps.device_count)
    return none(
        "q", "is on " + dev + ", but " + std::to_string(caps.device_count) + " CUDA device(s) are present");
  if (requested == Kernel::kCpuTiled)
    return none("options.kernel", "cpu runs on CPU tensors, but q is on " + dev);
  if (caps.cc_major < 8)
    return none("q", "is on " + dev + " of compute capability " + std::to_string(caps.cc_major) + "." +
                         std::to_string(caps.cc_minor) + "; tileattn needs 8.0 or newer");
  const bool hopper = caps.cc_major == 9 && caps.cc_minor == 0 && caps.sm90_built;
  if (requested == Kernel::kCudaSm90 && !hopper)
    return none("options.kernel", "sm90 needs an sm_90 GPU and a build with sm90a kernels (" + dev + " is " +
                                      std::to_string(caps.cc_major) + "." + std::to_string(caps.cc_minor) +
                                      ")");
  // The cp.async gathers of small or left-padded pages run when asked for, not yet by default
  // (not measured against sm80's paged path).
  if (requested == Kernel::kCudaSm90 || (requested == Kernel::kAuto && hopper && !sm90_gathers(p))) {
    const Rejection r = cuda_kernel_rejects(p, Kernel::kCudaSm90);
    if (r.ok()) return Selection{Kernel::kCudaSm90, {}, {}};
    if (requested == Kernel::kCudaSm90) return none(r.argument, r.reason);
  }
  if (const Rejection r = cuda_kernel_rejects(p, Kernel::kCudaSm80); !r.ok())
    return none(r.argument, r.reason);
  return Selection{Kernel::kCudaSm80, {}, {}};
}

}  // namespace tileattn::detail
