// bwd_preprocess.cu: the backward's per-row values, a lane group a (row, head): dsum = rowsum(dO * O)
// - dlse and lse2 = lse log2(e) (0 for a row that sees no key, whose entries are all masked).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/online_softmax.h"
#include "cuda/check.h"
#include "cuda/sm80/sm80.h"

namespace tileattn::detail::sm80 {
namespace {

__device__ __forceinline__ float2 to_float2(uint32_t x, __nv_bfloat16) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
}
__device__ __forceinline__ float2 to_float2(uint32_t x, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&x));
}

template <class T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const uint32_t xa[4] = {a.x, a.y, a.z, a.w}, xb[4] = {b.x, b.y, b.z, b.w};
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 u = to_float2(xa[i], T{}), v = to_float2(xb[i], T{});
    acc = fmaf(u.x, v.x, fmaf(u.y, v.y, acc));
  }
  return acc;
}

// A group of `group` lanes (a power of two >= the head dim's 16-byte chunks, at most 32) a row:
// at head dim 64 a warp takes 4 rows at once, every lane loading (a warp a row left 24 lanes idle
// and ran at a quarter of the bandwidth at D = 64).
template <class T>
__global__ void __launch_bounds__(256)
    bwd_preprocess_kernel(const BwdKernelParams p, int group, float* zero, int64_t zero_floats) {
  const cuda::KernelParams& f = p.f;
  const int lane = threadIdx.x & 31, sub = lane & (group - 1);
  const int64_t rows = p.part_batch * f.heads_q * p.part_len, per_warp = 32 / group;
  const int64_t stride = int64_t{gridDim.x} * (blockDim.x / 32) * per_warp;
  for (int64_t item = (int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32) * per_warp + lane / group;
       item - lane / group < rows; item += stride) {
    const bool live = item < rows;  // the warp's shuffles need every lane
    const int64_t row = live ? item : rows - 1;
    const int64_t l = row % p.part_len, bh = row / p.part_len, h = bh % f.heads_q, b = bh / f.heads_q;
    const T* o = static_cast<const T*>(f.out) + b * f.o_sb + l * f.o_sl + h * f.o_sh;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_sb + l * p.do_sl + h * p.do_sh;
    float acc = 0.0f;
    for (int c = sub; c < f.d_chunks; c += group)
      acc += dot8<T>(*reinterpret_cast<const uint4*>(o + 8 * c), *reinterpret_cast<const uint4*>(d + 8 * c));
    for (int m = group / 2; m >= 1; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (live && sub == 0) {
      const float lse = f.lse[b * f.lse_sb + h * f.lse_sh + l * f.lse_sl];
      const float dl = p.dlse != nullptr ? p.dlse[b * p.dl_sb + h * p.dl_sh + l * p.dl_sl] : 0.0f;
      const int64_t w = b * p.w_sb + h * p.w_sh + l;
      p.dsum[w] = acc - dl;
      p.lse2[w] = lse == -INFINITY ? 0.0f : lse * kLog2e;
    }
  }
  // The zeroing after the rows' loads, over every thread of the grid.
  const int64_t threads = int64_t{gridDim.x} * blockDim.x,
                first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < zero_floats / 4; i += threads)
    reinterpret_cast<float4*>(zero)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (first < zero_floats % 4) zero[zero_floats / 4 * 4 + first] = 0.0f;
}

}  // namespace

void bwd_preprocess(const BwdKernelParams& kp, DType dtype, void* stream, float* zero, int64_t zero_floats) {
  const int64_t rows = kp.part_batch * kp.f.heads_q * kp.part_len;
  const auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {
    if (zero_floats > 0) TILEATTN_CUDA_CHECK(cudaMemsetAsync(zero, 0, zero_floats * sizeof(float), s));
    return;
  }
  int group = 1;
  while (group < 32 && group < kp.f.d_chunks) group *= 2;
  const int64_t per_block = 8 * (32 / group), blocks = (rows + per_block - 1) / per_block;
  const dim3 grid(static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)));
  if (dtype == DType::kBFloat16)
    bwd_preprocess_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(kp, group, zero, zero_floats);
  else
    bwd_preprocess_kernel<__half><<<grid, 256, 0, s>>>(kp, group, zero, zero_floats);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::sm80
