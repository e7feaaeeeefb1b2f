// cublas_handle.h: one cuBLAS handle per device, created on first use.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "tileattn/error.h"

namespace tileattn::detail::cuda {

cublasHandle_t cublas_handle(int device);

[[noreturn]] void throw_cublas(cublasStatus_t status, const char* what, const char* file, int line);

}  // namespace tileattn::detail::cuda

#define TILEATTN_CUBLAS_CHECK(call)                                                        \
  do {                                                                                     \
    const cublasStatus_t tileattn_status_ = (call);                                        \
    if (tileattn_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::tileattn::detail::cuda::throw_cublas(tileattn_status_, #call, __FILE__, __LINE__); \
  } while (0)
