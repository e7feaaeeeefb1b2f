// eager.cu: standard attention on the GPU as frameworks run it eagerly, three passes over
// device memory:
//   1. S = scale Q K^T         cuBLAS batched GEMM -> [B, Hq, Lq, Lk] in the working dtype
//   2. P = softmax(mask(S))    one kernel, fp32 math, writes another [B, Hq, Lq, Lk] tensor
//   3. O = P V                 cuBLAS batched GEMM -> out
// S and P really live in device memory: this is the speed, memory and traffic baseline.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "cuda/check.h"
#include "cuda/common/math.cuh"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "cuda/eager/cublas_handle.h"

namespace tileattn::detail::cuda {
namespace {

template <class T>
__device__ float to_float(T x);
template <>
__device__ float to_float(float x) {
  return x;
}
template <>
__device__ float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

__device__ float block_reduce(float x, bool is_max, float* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from the previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
  for (int off = 16; off > 0; off /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  return x;
}

// One block per row of S: softcap and mask, then a max pass, a sum pass and a write pass over
// the row (each reading S again from memory, as an unfused softmax does).
template <class T>
__global__ void softmax_rows(const T* __restrict__ s, T* __restrict__ p, float* __restrict__ lse,
                             Strides3 lse_stride, int64_t heads, int64_t seqlen_q, int64_t seqlen_k,
                             WindowMask mask, float softcap, int64_t rows) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % seqlen_q, h = (row / seqlen_q) % heads, b = row / (seqlen_q * heads);
    const T* srow = s + row * seqlen_k;
    T* prow = p + row * seqlen_k;
    const int64_t lo = mask.lo(i), hi = mask.hi(i);
    auto logit = [&](int64_t j) {
      float x = to_float(srow[j]);
      if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
      return (j < lo || j >= hi) ? -INFINITY : x * kLog2e;
    };
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < seqlen_k; j += blockDim.x) m = fmaxf(m, logit(j));
    m = block_reduce(m, true, scratch);
    const bool empty = m == -INFINITY;  // every key masked: P = 0, LSE = -inf
    float l = 0.0f;
    if (!empty)
      for (int64_t j = threadIdx.x; j < seqlen_k; j += blockDim.x) l += exp2f(logit(j) - m);
    l = block_reduce(l, false, scratch);
    const float inv_l = empty ? 0.0f : 1.0f / l;
    for (int64_t j = threadIdx.x; j < seqlen_k; j += blockDim.x)
      prow[j] = from_float<T>(empty ? 0.0f : exp2f(logit(j) - m) * inv_l);
    if (lse && threadIdx.x == 0)
      lse[b * lse_stride.b + h * lse_stride.h + i * lse_stride.l] = empty ? -INFINITY : (m + log2f(l)) * kLn2;
  }
}

template <class T>
constexpr cudaDataType_t kCudaType = CUDA_R_32F;
template <>
constexpr cudaDataType_t kCudaType<__half> = CUDA_R_16F;
template <>
constexpr cudaDataType_t kCudaType<__nv_bfloat16> = CUDA_R_16BF;

// RAII for stream-ordered device allocations.
struct DeviceBuffer {
  void* ptr = nullptr;
  cudaStream_t stream;
  DeviceBuffer(size_t bytes, cudaStream_t s) : stream(s) {
    if (bytes) TILEATTN_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, stream));
  }
  ~DeviceBuffer() {
    if (ptr) (void)cudaFreeAsync(ptr, stream);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class T>
int64_t run(const AttnParams& p) {
  const int64_t B = p.batch, H = p.heads_q, Lq = p.seqlen_q, Lk = p.seqlen_k, D = p.head_dim;
  const int64_t batches = B * H, sp_elems = batches * Lq * Lk;
  if (batches == 0 || Lq == 0) return 0;
  cudaStream_t stream = static_cast<cudaStream_t>(p.cuda_stream);
  DeviceGuard guard(p.device_index);
  cublasHandle_t handle = cublas_handle(p.device_index);
  TILEATTN_CUBLAS_CHECK(cublasSetStream(handle, stream));

  DeviceBuffer s_buf(sp_elems * sizeof(T), stream), p_buf(sp_elems * sizeof(T), stream);
  T* s = static_cast<T*>(s_buf.ptr);
  T* prob = static_cast<T*>(p_buf.ptr);

  // Pointer arrays for the batched GEMMs: GQA makes the kv head h / group, which no single
  // batch stride expresses.
  std::vector<const void*> host_ptrs(5 * batches);
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* out = static_cast<T*>(p.out);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = b * H + h, hk = h / p.group_size();
      host_ptrs[i] = q + b * p.q_stride.b + h * p.q_stride.h;
      host_ptrs[batches + i] = k + b * p.k_stride.b + hk * p.k_stride.h;
      host_ptrs[2 * batches + i] = v + b * p.v_stride.b + hk * p.v_stride.h;
      host_ptrs[3 * batches + i] = s + i * Lq * Lk;  // S and P rows are dense [Lq][Lk]
      host_ptrs[4 * batches + i] = out + b * p.out_stride.b + h * p.out_stride.h;
    }
  DeviceBuffer ptr_buf(host_ptrs.size() * sizeof(void*), stream);
  TILEATTN_CUDA_CHECK(cudaMemcpyAsync(ptr_buf.ptr, host_ptrs.data(), host_ptrs.size() * sizeof(void*),
                                      cudaMemcpyHostToDevice, stream));
  const void** dptrs = static_cast<const void**>(ptr_buf.ptr);
  // P's rows, for the second GEMM's A operand.
  std::vector<const void*> p_ptrs(batches);
  for (int64_t i = 0; i < batches; ++i) p_ptrs[i] = prob + i * Lq * Lk;
  DeviceBuffer pptr_buf(batches * sizeof(void*), stream);
  TILEATTN_CUDA_CHECK(
      cudaMemcpyAsync(pptr_buf.ptr, p_ptrs.data(), batches * sizeof(void*), cudaMemcpyHostToDevice, stream));

  // cuBLAS is column-major: a row-major [rows][ld] matrix is a column-major [ld-major] one.
  // 1. S (row-major [Lq][Lk]) = column-major S^T [Lk x Lq] = K [Lk x D] * Q^T [D x Lq].
  const float alpha_s = p.scale, one = 1.0f, zero = 0.0f;
  TILEATTN_CUBLAS_CHECK(cublasGemmBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(Lk), static_cast<int>(Lq), static_cast<int>(D),
      &alpha_s, dptrs + batches, kCudaType<T>, static_cast<int>(p.k_stride.l), dptrs, kCudaType<T>,
      static_cast<int>(p.q_stride.l), &zero, const_cast<void**>(dptrs + 3 * batches), kCudaType<T>,
      static_cast<int>(Lk), static_cast<int>(batches), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

  // 2. P = softmax(S).
  const WindowMask mask = p.window_mask();
  const int64_t rows = batches * Lq;
  const unsigned grid = static_cast<unsigned>(rows < (1 << 30) ? rows : (1 << 30));
  softmax_rows<T><<<grid, 256, 0, stream>>>(s, prob, static_cast<float*>(p.lse), p.lse_stride, H, Lq, Lk,
                                            mask, p.softcap, rows);
  TILEATTN_CUDA_CHECK_LAUNCH();

  // 3. O (row-major [Lq][D], row stride out_stride.l) = column-major O^T [D x Lq] = V^T [D x Lk] * P^T [Lk x
  // Lq].
  TILEATTN_CUBLAS_CHECK(cublasGemmBatchedEx(
      handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(D), static_cast<int>(Lq), static_cast<int>(Lk), &one,
      dptrs + 2 * batches, kCudaType<T>, static_cast<int>(p.v_stride.l),
      static_cast<const void**>(pptr_buf.ptr), kCudaType<T>, static_cast<int>(Lk), &zero,
      const_cast<void**>(dptrs + 4 * batches), kCudaType<T>, static_cast<int>(p.out_stride.l),
      static_cast<int>(batches), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  // The host pointer arrays die with this frame: wait for the copies that read them.
  TILEATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return 2 * sp_elems * static_cast<int64_t>(sizeof(T));
}

}  // namespace

int64_t eager(const AttnParams& p) {
  // cuBLAS takes 32-bit leading dimensions, nonzero, and at least one key.
  const std::pair<const char*, const Strides4*> tensors[] = {
      {"q", &p.q_stride}, {"k", &p.k_stride}, {"v", &p.v_stride}, {"out", &p.out_stride}};
  for (auto [name, st] : tensors) {
    if (st->d != 1)
      throw Error(name, "head_dim stride is " + std::to_string(st->d) + "; eager on CUDA needs 1");
    if (st->l < 1 || st->l > INT32_MAX)
      throw Error(name, "sequence stride " + std::to_string(st->l) + " is outside 1..2^31-1 (eager on CUDA)");
  }
  if (p.seqlen_k == 0) throw Error("k", "seqlen_k is 0; eager on CUDA needs at least one key");
  if (p.seqlen_q > INT32_MAX || p.seqlen_k > INT32_MAX || p.batch * p.heads_q > INT32_MAX)
    throw Error("q", "batch * heads " + std::to_string(p.batch * p.heads_q) +
                         " or a sequence length is past " +
                         "2^31 - 1, which eager on CUDA (cuBLAS, 32-bit sizes) cannot take");
  switch (p.dtype) {
    case DType::kFloat32:
      return run<float>(p);
    case DType::kFloat16:
      return run<__half>(p);
    case DType::kBFloat16:
      return run<__nv_bfloat16>(p);
    default:
      throw Error("q", std::string("dtype ") + dtype_name(p.dtype) + " is not supported by eager on CUDA");
  }
}

}  // namespace tileattn::detail::cuda
