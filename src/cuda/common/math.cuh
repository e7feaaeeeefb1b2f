// math.cuh: device helpers every CUDA kernel shares: shared-memory addresses, bf16/fp16 packing,
// quad reductions (the mma.sync and wgmma accumulator layouts), ex2/rcp on the special-function
// unit and tanh built from them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tileattn::detail::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Two floats rounded to nearest into one 32-bit register: lo in the low half (the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));  // first source -> high half
  return r;
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// One float rounded to nearest (float: itself).
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// Max or sum over the 4 lanes of a quad: in the mma.sync and wgmma accumulator layouts they
// hold the columns of the same rows.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x on the special-function unit (relative error ~2^-22; -inf -> 0, NaN -> NaN).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1/x on the special-function unit (1 ulp; inf -> 0).
__device__ __forceinline__ float rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) = 1 - 2 / (e^(2x) + 1), with two_x_log2e = 2 x log2(e): two special-function ops and an
// absolute error of a few fp32 ulps of 1 (tanh.approx would be ~2^-11 relative, too coarse once
// multiplied by a softcap of 30 or 50). Saturates to +-1 and keeps NaN.
__device__ __forceinline__ float tanh_via_ex2(float two_x_log2e) {
  return fmaf(-2.0f, rcp(ex2(two_x_log2e) + 1.0f), 1.0f);
}

}  // namespace tileattn::detail::cuda
