// tune_sm90_util.cu: what the tuning executables share.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "fill.h"
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {

double max_diff_bf16(const void* a, const void* b, int64_t n) {
  std::vector<uint16_t> x(n), y(n);
  cudaMemcpy(x.data(), a, n * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(y.data(), b, n * 2, cudaMemcpyDeviceToHost);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(bf16_to_float(x[i])) - bf16_to_float(y[i]));
    if (!(d <= worst)) worst = d;  // NaN sticks
  }
  return worst;
}

namespace {
__global__ void scatter_kernel(const uint4* src, uint4* dst, const int32_t* table, int64_t units) {
  const int64_t g = blockIdx.x;
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) dst[table[g] * units + i] = src[g * units + i];
}
}  // namespace

void scatter_pages(const void* src, void* dst, const int32_t* table, int64_t pages, int64_t page_bytes) {
  scatter_kernel<<<static_cast<unsigned>(pages), 256>>>(static_cast<const uint4*>(src),
                                                        static_cast<uint4*>(dst), table, page_bytes / 16);
  if (cudaDeviceSynchronize() != cudaSuccess) std::printf("scatter_pages failed\n");
}

}  // namespace tileattn::sm90_tune
