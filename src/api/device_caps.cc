// device_caps.cc: DeviceCaps of a tensor's device.
#include "api/device_caps.h"
#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_api.h"
#endif

namespace tileattn::detail {

DeviceCaps device_caps(const Device& device) {
  DeviceCaps caps;
  caps.kind = device.kind;
#if defined(TILEATTN_WITH_CUDA)
  caps.cuda_built = true;
  caps.sm90_built = cuda::sm90_built();
  if (device.kind == DeviceKind::kCUDA) {
    caps.device_count = cuda::device_count();
    if (device.index >= 0 && device.index < caps.device_count) {
      const auto info = cuda::device_info(device.index);
      caps.cc_major = info.cc_major;
      caps.cc_minor = info.cc_minor;
    }
  }
#endif
  return caps;
}

}  // namespace tileattn::detail
