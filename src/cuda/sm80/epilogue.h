// epilogue.h: writes a warp's finished rows once: O = O_acc / l in the output dtype, and the LSE.
#pragma once

#include <cstdint>

#include "common/online_softmax.h"
#include "cuda/sm80/ptx.h"
#include "cuda/sm80/smem_tile.h"

namespace tileattn::detail::sm80 {

// O goes through shared memory so that global stores are whole 16-byte chunks of a row (a lane's
// fragment is 4 bytes wide). The staging area is this warp's own rows of the Q tile: no other
// warp reads them, and this warp is done with them, so a __syncwarp is the only sync needed.
//   s_rows: this warp's first row of the Q tile (kRows rows of kRowBytes)
//   out:    this warp's first output row; rows >= valid_rows and chunks >= d_chunks are not
//           written (the ragged end of the sequence, the padding of the head dim).
template <class T, int kM, int kDT, int kRowBytes>
__device__ __forceinline__ void store_o(const float (&o)[kM][kDT][4], const float (&inv_l)[kM][2],
                                        unsigned char* s_rows, T* out, int64_t out_row_stride, int valid_rows,
                                        int d_chunks, int lane) {
  constexpr int kRows = 16 * kM;
  const int g = lane >> 2, t = lane & 3;
  __syncwarp();  // this warp's last ldmatrix of its Q rows precedes the overwrite
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int j = 0; j < kDT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * i + 8 * h + g;
        // inv_l = 0 marks a row that saw no key: exactly 0, even if a V in its blocks held NaN.
        const bool empty = inv_l[i][h] == 0.0f;
        const uint32_t packed = pack2<T>(empty ? 0.0f : o[i][j][2 * h] * inv_l[i][h],
                                         empty ? 0.0f : o[i][j][2 * h + 1] * inv_l[i][h]);
        *reinterpret_cast<uint32_t*>(s_rows + swizzled<kRowBytes>(r, j) + 4 * t) = packed;
      }
  __syncwarp();
#pragma unroll
  for (int idx = lane; idx < kRows * kDT; idx += 32) {
    const int r = idx / kDT, c = idx % kDT;
    if (r < valid_rows && c < d_chunks)
      *reinterpret_cast<uint4*>(out + r * out_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(s_rows + swizzled<kRowBytes>(r, c));
  }
}

// Split-KV: a warp's rows as fp32 partial state (O / l, unrounded) and their LSEs, straight from
// the fragments (two floats a store). rows >= valid_rows and columns past d_chunks are skipped.
template <int kM, int kDT>
__device__ __forceinline__ void store_partial(const float (&o)[kM][kDT][4], const float (&inv_l)[kM][2],
                                              const SoftmaxRow (&state)[kM][2], float* o_part,
                                              int64_t row_stride, float* lse_part, int valid_rows,
                                              int d_chunks, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * i + 8 * h + g;
      if (r >= valid_rows) continue;
      const bool empty = inv_l[i][h] == 0.0f;
#pragma unroll
      for (int j = 0; j < kDT; ++j)
        if (j < d_chunks)
          *reinterpret_cast<float2*>(o_part + r * row_stride + 8 * j + 2 * t) = make_float2(
              empty ? 0.0f : o[i][j][2 * h] * inv_l[i][h], empty ? 0.0f : o[i][j][2 * h + 1] * inv_l[i][h]);
      if (t == 0) lse_part[r] = state[i][h].lse();
    }
}

}  // namespace tileattn::detail::sm80
