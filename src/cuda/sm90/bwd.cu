// bwd.cu: launching the sm90 backward (bwd_kernel.cuh) for D in {64, 128} x {bf16, fp16} x
// {NoMask, WindowMask}, and the conversion of the fp32 dQ sums into dq. Compiled for sm_90a
// only (other targets get empty kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace tileattn::detail::sm90 {
namespace {

template <int kD, class T, class Mask>
void launch(const BackwardParams& b, const BwdParams& kp) {
  const AttnParams& p = b.fwd;
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap tm_q = map_of(p.q, bf16, p.q_stride, p.batch, p.seqlen_q, p.heads_q, kD, kBwdBlockM);
  const CUtensorMap tm_do =
      map_of(b.dout, bf16, b.dout_stride, p.batch, p.seqlen_q, p.heads_q, kD, kBwdBlockM);
  const CUtensorMap tm_k = map_of(p.k, bf16, p.k_stride, p.batch, p.seqlen_k, p.heads_kv, kD, kBwdBlockN);
  const CUtensorMap tm_v = map_of(p.v, bf16, p.v_stride, p.batch, p.seqlen_k, p.heads_kv, kD, kBwdBlockN);
  constexpr int kSmem = BwdSmem<kD>::kBytes;
  cuda::set_max_dynamic_smem<&attention_bwd_sm90<kD, T, Mask>>(kSmem, p.device_index);
  const auto ctas = static_cast<unsigned>(kp.n_blocks * kp.heads_kv * kp.batch);
  attention_bwd_sm90<kD, T, Mask>
      <<<dim3(ctas), 2 * kWarpgroupThreads, kSmem, static_cast<cudaStream_t>(p.cuda_stream)>>>(
          tm_q, tm_k, tm_v, tm_do, kp);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

// One thread per 8 elements of a row: two float4 reads of dq_accum, one 16-byte store.
template <class T>
__global__ void __launch_bounds__(256)
    dq_convert(const float* accum, T* dq, int64_t rows_pad, int64_t len, int64_t heads, int64_t head_dim,
               int64_t sb, int64_t sl, int64_t sh, float scale, int64_t total) {
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t chunks = head_dim / 8, c = idx % chunks, row = idx / chunks;
  const int64_t l = row % len, bh = row / len, h = bh % heads, b = bh / heads;
  const float4* src = reinterpret_cast<const float4*>(accum + ((bh * rows_pad) + l) * head_dim + 8 * c);
  const float4 lo = src[0], hi = src[1];
  uint4 out;
  out.x = cuda::pack2<T>(lo.x * scale, lo.y * scale);
  out.y = cuda::pack2<T>(lo.z * scale, lo.w * scale);
  out.z = cuda::pack2<T>(hi.x * scale, hi.y * scale);
  out.w = cuda::pack2<T>(hi.z * scale, hi.w * scale);
  *reinterpret_cast<uint4*>(dq + b * sb + l * sl + h * sh + 8 * c) = out;
}

}  // namespace

void backward(const BackwardParams& b, const BwdParams& kp) {
  if (kp.n_blocks == 0 || kp.heads_kv == 0 || kp.batch == 0) return;
  cuda::for_dtype_and_mask(b.fwd, [&](auto element, auto mask) {
    using T = decltype(element);
    using Mask = typename decltype(mask)::type;
    if (b.fwd.head_dim == 64)
      launch<64, T, Mask>(b, kp);
    else if (b.fwd.head_dim == 128)
      launch<128, T, Mask>(b, kp);
    else
      throw RuntimeError("sm90 backward: head_dim " + std::to_string(b.fwd.head_dim) + " has no kernel");
  });
}

void dq_from_accum(const BackwardParams& b, const BwdParams& kp) {
  const AttnParams& p = b.fwd;
  const int64_t total = p.batch * p.heads_q * p.seqlen_q * (p.head_dim / 8);
  if (total == 0) return;
  const auto grid = static_cast<unsigned>((total + 255) / 256);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const int64_t rows_pad = kp.m_blocks * kBwdBlockM;
  if (p.dtype == DType::kBFloat16)
    dq_convert<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        kp.dq_accum, static_cast<__nv_bfloat16*>(b.dq), rows_pad, p.seqlen_q, p.heads_q, p.head_dim,
        b.dq_stride.b, b.dq_stride.l, b.dq_stride.h, kp.scale, total);
  else
    dq_convert<__half><<<grid, 256, 0, stream>>>(kp.dq_accum, static_cast<__half*>(b.dq), rows_pad,
                                                 p.seqlen_q, p.heads_q, p.head_dim, b.dq_stride.b,
                                                 b.dq_stride.l, b.dq_stride.h, kp.scale, total);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::sm90
