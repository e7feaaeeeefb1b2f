// merge.cuh: one row's split-KV merge by one warp (common/combine.h's arithmetic), shared by the
// combine kernel and the sm90 kernel's in-kernel merge. Partial states are read through L2
// (ld.global.cg): in-kernel, other CTAs wrote them during the same launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/combine.h"

namespace tileattn::detail::cuda {

template <class T>
__device__ __forceinline__ void store_element(void* base, int64_t i, float x) {
  if constexpr (sizeof(T) == 4)
    static_cast<float*>(base)[i] = x;
  else if constexpr (std::is_same_v<T, __half>)
    static_cast<__half*>(base)[i] = __float2half_rn(x);
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
}

// All 32 lanes, arguments warp-uniform: the splits' LSEs at lse[s * l_ss] and normalized rows at
// o[s * o_ss + d * o_sd] merge into out[out_row + d * out_sd] (T); returns the merged LSE. A
// split whose LSE is -inf weighs nothing; a NaN LSE makes the row NaN. splits <= 32 kChunks:
// split s's LSE, then its weight, is lane s % 32's register s / 32, read once. Each lane sums
// kCols columns, kUnroll splits at a time (kCols kUnroll loads in flight); an empty split's slot
// (never written) is read but weighs nothing by selection.
template <class T, int kChunks, int kCols, int kUnroll>
__device__ __forceinline__ float merge_row(const float* lse, int64_t l_ss, const float* o, int64_t o_ss,
                                           int64_t o_sd, int splits, int64_t head_dim, void* out,
                                           int64_t out_row, int64_t out_sd) {
  const int lane = threadIdx.x % 32;
  float x[kChunks];
  float m = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int s = 32 * i + lane;
    x[i] = s < splits ? __ldcg(lse + s * l_ss) : -INFINITY;
    if (x[i] != x[i])
      nan = true;
    else
      m = fmaxf(m, x[i]);
  }
  for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  nan = __any_sync(0xffffffffu, nan);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    x[i] = (m == -INFINITY || x[i] == -INFINITY || nan) ? 0.0f : expf(x[i] - m);  // the weight
    sum += x[i];
  }
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 32 * kCols) {
    float acc[kCols] = {};
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int n = min(32, splits - 32 * i);
#pragma unroll kUnroll
      for (int t = 0; t < n; ++t) {
        const float w = __shfl_sync(0xffffffffu, x[i], t);
        const float* os = o + (32 * i + t) * o_ss;
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const int64_t d = d0 + lane + 32 * c;
          const float v = d < head_dim ? __ldcg(os + d * o_sd) : 0.0f;
          acc[c] += w != 0.0f ? w * v : 0.0f;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t d = d0 + lane + 32 * c;
      if (d < head_dim) store_element<T>(out, out_row + d * out_sd, nan ? NAN : acc[c] * inv);
    }
  }
  return merged_lse(m, sum, nan);
}

}  // namespace tileattn::detail::cuda
