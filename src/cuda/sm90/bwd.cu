// bwd.cu: launching the sm90 backward (bwd_kernel.cuh) for D in {64, 128, 256} x {bf16, fp16} x
// {NoMask, WindowMask} x {dense, varlen}, and the conversion of the fp32 dQ sums into dq. Compiled for sm_90a
// only (other targets get empty kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/common/math.cuh"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_launch.cuh"
#include "cuda/sm90/bwd_layout.h"

namespace tileattn::detail::sm90 {
namespace {

template <int kD, class T, class Mask>
void launch_for(const BackwardParams& b, const BwdParams& kp) {
  if (b.fwd.seqs.ragged())
    launch_bwd<kD, T, Mask, true>(b, kp);
  else
    launch_bwd<kD, T, Mask, false>(b, kp);
}

// One thread per float4 of dq_accum (bwd.h: tiles of block_m rows in the wgmma accumulators'
// order): float4 `within` of a tile holds columns c and c + 1 of its rows r and r + 8
// (bwd_layout.h: dq_accum_pos); rows past the sequence (and gap tiles, DqTiles) are not written.
template <class T>
__global__ void __launch_bounds__(256)
    dq_convert(const float* accum, T* dq, DqTiles tiles, Seqs seqs, int head_dim, int64_t sb, int64_t sl,
               int64_t sh, float scale, int64_t total) {
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t per_tile = int64_t{tiles.block_m} * head_dim / 4, tile = idx / per_tile;
  int r = 0, c = 0;
  dq_accum_pos(static_cast<int>(idx % per_tile), head_dim, &r, &c);
  int64_t b = 0, m = 0;
  const int64_t h = tile / tiles.head_blocks;
  tiles.locate(tile % tiles.head_blocks, &b, &m);
  const SeqInfo seq = seq_info(seqs, b);
  const int64_t row = m * tiles.block_m + r;
  if (row >= seq.len_q) return;
  const float4 v = reinterpret_cast<const float4*>(accum)[idx];
  T* out = dq + b * sb + h * sh + (seq.q_start + row) * sl + c;
  *reinterpret_cast<uint32_t*>(out) = cuda::pack2<T>(v.x * scale, v.y * scale);
  if (row + 8 < seq.len_q)
    *reinterpret_cast<uint32_t*>(out + 8 * sl) = cuda::pack2<T>(v.z * scale, v.w * scale);
}

}  // namespace

void backward(const BackwardParams& b, const BwdParams& kp) {
  if (kp.n_blocks == 0 || kp.heads_kv == 0 || kp.batch == 0) return;
  cuda::for_dtype_and_mask(b.fwd, [&](auto element, auto mask) {
    using T = decltype(element);
    using Mask = typename decltype(mask)::type;
    if (b.fwd.head_dim == 64)
      launch_for<64, T, Mask>(b, kp);
    else if (b.fwd.head_dim == 128)
      launch_for<128, T, Mask>(b, kp);
    else if (b.fwd.head_dim == 256)
      launch_for<256, T, Mask>(b, kp);
    else
      throw RuntimeError("sm90 backward: head_dim " + std::to_string(b.fwd.head_dim) + " has no kernel");
  });
}

void dq_from_accum(const BackwardParams& b, const BwdParams& kp) {
  const AttnParams& p = b.fwd;
  const int head_dim = static_cast<int>(p.head_dim);
  const int64_t total = p.heads_q * kp.dq_tiles.head_blocks * kp.dq_tiles.block_m * head_dim / 4;
  if (total == 0) return;
  const auto grid = static_cast<unsigned>((total + 255) / 256);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  if (p.dtype == DType::kBFloat16)
    dq_convert<__nv_bfloat16><<<grid, 256, 0, stream>>>(kp.dq_accum, static_cast<__nv_bfloat16*>(b.dq),
                                                        kp.dq_tiles, p.seqs, head_dim, b.dq_stride.b,
                                                        b.dq_stride.l, b.dq_stride.h, kp.scale, total);
  else
    dq_convert<__half><<<grid, 256, 0, stream>>>(kp.dq_accum, static_cast<__half*>(b.dq), kp.dq_tiles, p.seqs,
                                                 head_dim, b.dq_stride.b, b.dq_stride.l, b.dq_stride.h,
                                                 kp.scale, total);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::sm90
