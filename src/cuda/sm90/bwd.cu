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
#include "cuda/sm90/bwd_layout.h"
#include "cuda/sm90/tensor_map.h"

namespace tileattn::detail::sm90 {
namespace {

template <int kD, class T, class Mask>
void launch(const BackwardParams& b, const BwdParams& kp) {
  const AttnParams& p = b.fwd;
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kM = BwdSmem<kD>::kM;
  const CUtensorMap tm_q = map_of(p.q, bf16, p.q_stride, p.batch, p.seqlen_q, p.heads_q, kD, kM);
  const CUtensorMap tm_do = map_of(b.dout, bf16, b.dout_stride, p.batch, p.seqlen_q, p.heads_q, kD, kM);
  const CUtensorMap tm_k = map_of(p.k, bf16, p.k_stride, p.batch, p.seqlen_k, p.heads_kv, kD, kBwdBlockN);
  const CUtensorMap tm_v = map_of(p.v, bf16, p.v_stride, p.batch, p.seqlen_k, p.heads_kv, kD, kBwdBlockN);
  constexpr int kSmem = BwdSmem<kD>::kBytes;
  cuda::set_max_dynamic_smem<&attention_bwd_sm90<kD, T, Mask>>(kSmem, p.device_index);
  const auto ctas = static_cast<unsigned>(kp.n_blocks * kp.heads_kv * kp.batch);
  attention_bwd_sm90<kD, T, Mask>
      <<<dim3(ctas), 3 * kWarpgroupThreads, kSmem, static_cast<cudaStream_t>(p.cuda_stream)>>>(
          tm_q, tm_k, tm_v, tm_do, kp);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

// One thread per float4 of dq_accum (bwd.h: tiles of block_m rows in the wgmma accumulators'
// order): float4 `within` of a tile holds columns c and c + 1 of its rows r and r + 8
// (bwd_layout.h: dq_accum_pos); rows past the sequence are not written.
template <class T>
__global__ void __launch_bounds__(256)
    dq_convert(const float* accum, T* dq, int64_t m_blocks, int block_m, int64_t len, int64_t heads,
               int head_dim, int64_t sb, int64_t sl, int64_t sh, float scale, int64_t total) {
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t per_tile = block_m * head_dim / 4, tile = idx / per_tile;
  int r = 0, c = 0;
  dq_accum_pos(static_cast<int>(idx % per_tile), head_dim, &r, &c);
  const int64_t bh = tile / m_blocks, h = bh % heads, b = bh / heads;
  const int64_t row = tile % m_blocks * block_m + r;
  const float4 v = reinterpret_cast<const float4*>(accum)[idx];
  T* out = dq + b * sb + h * sh + c;
  if (row < len) *reinterpret_cast<uint32_t*>(out + row * sl) = cuda::pack2<T>(v.x * scale, v.y * scale);
  if (row + 8 < len)
    *reinterpret_cast<uint32_t*>(out + (row + 8) * sl) = cuda::pack2<T>(v.z * scale, v.w * scale);
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
  const int block_m = bwd_block_m(p.head_dim), head_dim = static_cast<int>(p.head_dim);
  const int64_t total = p.batch * p.heads_q * kp.m_blocks * block_m * head_dim / 4;
  if (total == 0) return;
  const auto grid = static_cast<unsigned>((total + 255) / 256);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  if (p.dtype == DType::kBFloat16)
    dq_convert<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        kp.dq_accum, static_cast<__nv_bfloat16*>(b.dq), kp.m_blocks, block_m, p.seqlen_q, p.heads_q, head_dim,
        b.dq_stride.b, b.dq_stride.l, b.dq_stride.h, kp.scale, total);
  else
    dq_convert<__half><<<grid, 256, 0, stream>>>(kp.dq_accum, static_cast<__half*>(b.dq), kp.m_blocks,
                                                 block_m, p.seqlen_q, p.heads_q, head_dim, b.dq_stride.b,
                                                 b.dq_stride.l, b.dq_stride.h, kp.scale, total);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::sm90
