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

// One CTA a dQ tile of dq_accum (bwd.h: block_m x D fp32 in the wgmma accumulators' order,
// bwd_layout.h: dq_accum_pos): its float4s read in order into a row-major tile of T in shared
// memory (rows padded by 16 bytes: the pairs' stores and the rows' loads are free of bank
// conflicts), then stored a row's 16 bytes a thread. Rows past the sequence (and gap tiles,
// DqTiles) are not written. A thread a float4 with its dq row and column worked out alone ran at
// half the bandwidth (64-bit divisions, 4-byte stores into half sectors).
template <class T, int kD, int kM>
__global__ void __launch_bounds__(256) dq_convert(const float* accum, T* dq, DqTiles tiles, Seqs seqs,
                                                  int64_t sb, int64_t sl, int64_t sh, float scale) {
  constexpr int kRow = kD + 8, kChunks = kD / 8;
  __shared__ __align__(16) T tile_s[kM * kRow];
  const int64_t tile = blockIdx.x, h = tile / tiles.head_blocks;
  int64_t b = 0, m = 0;
  tiles.locate(tile % tiles.head_blocks, &b, &m);
  const SeqInfo seq = seq_info(seqs, b);
  const int64_t rows = seq.len_q - m * kM;
  if (rows <= 0) return;
  constexpr int kPer = kM * kD / 4 / 256;  // float4s a thread: all loads in flight before the stores
  const float4* src = reinterpret_cast<const float4*>(accum) + tile * (kM * kD / 4) + threadIdx.x;
  float4 v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) v[j] = src[256 * j];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    int r = 0, c = 0;
    dq_accum_pos(threadIdx.x + 256 * j, kD, kM, &r, &c);
    if constexpr (bwd_dq_transposed(kM)) {  // (r, c), (r + 1, c), (r, c + 8), (r + 1, c + 8)
      tile_s[r * kRow + c] = cuda::from_float<T>(v[j].x * scale);
      tile_s[(r + 1) * kRow + c] = cuda::from_float<T>(v[j].y * scale);
      tile_s[r * kRow + c + 8] = cuda::from_float<T>(v[j].z * scale);
      tile_s[(r + 1) * kRow + c + 8] = cuda::from_float<T>(v[j].w * scale);
    } else {
      *reinterpret_cast<uint32_t*>(&tile_s[r * kRow + c]) = cuda::pack2<T>(v[j].x * scale, v[j].y * scale);
      *reinterpret_cast<uint32_t*>(&tile_s[(r + 8) * kRow + c]) =
          cuda::pack2<T>(v[j].z * scale, v[j].w * scale);
    }
  }
  __syncthreads();
  T* out = dq + b * sb + h * sh + (seq.q_start + m * kM) * sl;
  for (int i = threadIdx.x; i < kM * kChunks; i += 256) {
    const int r = i / kChunks, c = 8 * (i % kChunks);
    if (r < rows)
      *reinterpret_cast<uint4*>(out + r * sl + c) = *reinterpret_cast<const uint4*>(&tile_s[r * kRow + c]);
  }
}

// The conversion for the tiles' block_m: the head dim's rows a step under a mask or without one.
template <class T, int kD>
void convert_for(const BackwardParams& b, const BwdParams& kp, unsigned grid, cudaStream_t stream) {
  constexpr int kMasked = bwd_block_m(kD, true), kOpen = bwd_block_m(kD, false);
  const int m = kp.dq_tiles.block_m;
  auto* const kernel = m == kMasked ? &dq_convert<T, kD, kMasked>
                       : m == kOpen ? &dq_convert<T, kD, kOpen>
                                    : nullptr;
  if (kernel == nullptr)
    throw RuntimeError("sm90 dQ conversion: block_m " + std::to_string(m) + " at head_dim " +
                       std::to_string(kD) + " has no kernel");
  kernel<<<grid, 256, 0, stream>>>(kp.dq_accum, static_cast<T*>(b.dq), kp.dq_tiles, b.fwd.seqs, b.dq_stride.b,
                                   b.dq_stride.l, b.dq_stride.h, kp.scale);
}

template <class T>
void convert(const BackwardParams& b, const BwdParams& kp, unsigned grid, cudaStream_t stream) {
  if (b.fwd.head_dim == 64)
    convert_for<T, 64>(b, kp, grid, stream);
  else if (b.fwd.head_dim == 128)
    convert_for<T, 128>(b, kp, grid, stream);
  else if (b.fwd.head_dim == 256)
    convert_for<T, 256>(b, kp, grid, stream);
  else
    throw RuntimeError("sm90 dQ conversion: head_dim " + std::to_string(b.fwd.head_dim) + " has no kernel");
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
  const int64_t tiles = p.heads_q * kp.dq_tiles.head_blocks;
  if (tiles == 0) return;
  if (tiles >= (int64_t{1} << 31))
    throw RuntimeError("sm90 backward: " + std::to_string(tiles) + " dQ tiles");
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  if (p.dtype == DType::kBFloat16)
    convert<__nv_bfloat16>(b, kp, static_cast<unsigned>(tiles), stream);
  else
    convert<__half>(b, kp, static_cast<unsigned>(tiles), stream);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::sm90
