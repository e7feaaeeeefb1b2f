// cublas_handle.cc: cuBLAS handles, one per device, kept for the life of the process.
#include "cuda/eager/cublas_handle.h"

#include <map>
#include <mutex>

namespace tileattn::detail::cuda {

void throw_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  throw RuntimeError(std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" +
                     cublasGetStatusString(status) + ") in " + what + " at " + file + ":" +
                     std::to_string(line));
}

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::map<int, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t handle = nullptr;
  TILEATTN_CUBLAS_CHECK(cublasCreate(&handle));
  // The baseline is the plain fp32-accumulating GEMM: no TF32 shortcuts for fp32 inputs.
  TILEATTN_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  handles.emplace(device, handle);
  return handle;
}

}  // namespace tileattn::detail::cuda
