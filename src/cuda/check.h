// check.h: every CUDA runtime and cuBLAS call goes through these; a failure throws RuntimeError
// naming the call, the file and line.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tileattn/error.h"

namespace tileattn::detail::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  throw RuntimeError(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                     ") in " + what + " at " + file + ":" + std::to_string(line));
}

}  // namespace tileattn::detail::cuda

#define TILEATTN_CUDA_CHECK(call)                                                     \
  do {                                                                                \
    const cudaError_t tileattn_err_ = (call);                                         \
    if (tileattn_err_ != cudaSuccess)                                                 \
      ::tileattn::detail::cuda::throw_cuda(tileattn_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: catches bad launch configurations at once.
#define TILEATTN_CUDA_CHECK_LAUNCH() TILEATTN_CUDA_CHECK(cudaGetLastError())
