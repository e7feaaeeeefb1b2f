// fill.cu: device fill by index hash and NaN counting for the large-tensor tests.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "fill.h"

namespace tileattn::cuda_test {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(hash_unit(static_cast<uint64_t>(i), seed));
}

// bf16 NaN: all exponent bits set and a nonzero mantissa.
__global__ void count_bf16_kernel(const uint16_t* p, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    local += (p[i] & 0x7fff) > 0x7f80;
  atomicAdd(count, local);
}

__global__ void count32_kernel(const float* p, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    local += isnan(p[i]);
  atomicAdd(count, local);
}

template <class Kernel, class T>
int64_t count(Kernel kernel, const T* p, int64_t n) {
  unsigned long long* d = nullptr;
  check(cudaMalloc(&d, sizeof *d), "cudaMalloc");
  check(cudaMemset(d, 0, sizeof *d), "cudaMemset");
  kernel<<<1024, 256>>>(p, n, d);
  check(cudaGetLastError(), "count launch");
  unsigned long long h = 0;
  check(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaFree(d), "cudaFree");
  return static_cast<int64_t>(h);
}

}  // namespace

void fill_hash_bf16(void* device_data, int64_t n, uint64_t seed) {
  fill_kernel<<<4096, 256>>>(static_cast<__nv_bfloat16*>(device_data), n, seed);
  check(cudaGetLastError(), "fill launch");
  check(cudaDeviceSynchronize(), "fill");
}

int64_t count_nan_bf16(const void* device_data, int64_t n) {
  return count(count_bf16_kernel, static_cast<const uint16_t*>(device_data), n);
}

int64_t count_nan32(const void* device_data, int64_t n) {
  return count(count32_kernel, static_cast<const float*>(device_data), n);
}

}  // namespace tileattn::cuda_test
