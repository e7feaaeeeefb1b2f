// tune_sm90_util.cu: what the tuning executables share.
#include <cmath>
#include <cstdint>
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

}  // namespace tileattn::sm90_tune
