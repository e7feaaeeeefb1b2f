// device_guard.h: makes a device current for a scope and restores the caller's afterwards.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"

namespace tileattn::detail::cuda {

// Makes the tensors' device current for the launch and restores the caller's afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TILEATTN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TILEATTN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tileattn::detail::cuda
