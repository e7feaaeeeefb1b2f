// device_caps.h: what kernel selection needs to know about a tensor's device (built kernels,
// device count, compute capability), asked of the CUDA runtime only for CUDA devices.
#pragma once

#include "dispatch/select.h"
#include "tileattn/tensor.h"

namespace tileattn::detail {

DeviceCaps device_caps(const Device& device);

}  // namespace tileattn::detail
