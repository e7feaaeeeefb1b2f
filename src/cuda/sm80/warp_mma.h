// warp_mma.h: one warp's two GEMMs of a key block on register fragments:
// S = Q K^T (A = Q from shared memory, B = K) and O += P V (A = P from registers, B = V).
//
// Fragment ownership (mma.sync m16n8k16 C layout), lane = 4 g + t:
//   s[i][j][0..1] = S rows 16i + g,     keys 8j + 2t, 8j + 2t + 1
//   s[i][j][2..3] = S rows 16i + g + 8, same keys
// and the same for o[i][j][...] with head-dim columns in place of keys.
#pragma once

#include <cstdint>

#include "cuda/sm80/ptx.h"
#include "cuda/sm80/smem_tile.h"

namespace tileattn::detail::sm80 {

// Per-lane ldmatrix offsets within the swizzled tiles (see smem_tile.h: chunk_step).
template <int kRowBytes>
struct LaneAddr {
  // Q as the A operand: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) are
  // registers a0..a3; lane l addresses row l % 16, chunk l / 16.
  static __device__ __forceinline__ uint32_t q(int row0, int lane) {
    const int r = row0 + (lane & 15), c = lane >> 4;
    return swizzled<kRowBytes>(r, c);
  }
  // K as B of Q K^T (K[n][d] is B in column-major): matrices (keys 0-7, d 0-7), (0-7, 8-15),
  // (8-15, 0-7), (8-15, 8-15) = b0, b1 of key tile 2p and b0, b1 of key tile 2p + 1.
  static __device__ __forceinline__ uint32_t k(int lane) {
    const int r = ((lane >> 4) << 3) + (lane & 7), c = (lane >> 3) & 1;
    return swizzled<kRowBytes>(r, c);
  }
  // V as B of P V, transposed on load (V[n][d] is row-major in k = key): matrices (keys 0-7,
  // d 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = b0, b1 of d tile 2p and of d tile 2p + 1.
  static __device__ __forceinline__ uint32_t v(int lane) {
    const int r = (((lane >> 3) & 1) << 3) + (lane & 7), c = lane >> 4;
    return swizzled<kRowBytes>(r, c);
  }
};

// s = Q K^T for kM m-tiles of Q (rows of this warp) and kN key tiles of 8, over kD head dims.
// s_q, s_k: tile addresses; q_lane, k_lane: this lane's offsets in them (LaneAddr).
template <class T, int kM, int kN, int kD, int kRowBytes>
__device__ __forceinline__ void gemm_qk(float (&s)[kM][kN][4], uint32_t s_q, uint32_t q_lane, uint32_t s_k,
                                        uint32_t k_lane) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int j = 0; j < kN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][j][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[kM][4];
#pragma unroll
    for (int i = 0; i < kM; ++i) ldmatrix_x4(a[i], s_q + chunk_step(q_lane, 2 * ks) + i * 16 * kRowBytes);
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, s_k + chunk_step(k_lane, 2 * ks) + np * 16 * kRowBytes);
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        mma_16816<T>(s[i][2 * np], a[i], b[0], b[1]);
        mma_16816<T>(s[i][2 * np + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// The A operand of P V for key step kk (keys 16kk..16kk+15) is exactly the C fragments of key
// tiles 2kk and 2kk + 1, packed in pairs: the S -> P hand-off never leaves registers.
template <class T, int kM, int kN>
__device__ __forceinline__ void pack_p(const float (&s)[kM][kN][4], uint32_t (&p)[kM][kN / 2][4]) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int kk = 0; kk < kN / 2; ++kk) {
      p[i][kk][0] = pack2<T>(s[i][2 * kk][0], s[i][2 * kk][1]);
      p[i][kk][1] = pack2<T>(s[i][2 * kk][2], s[i][2 * kk][3]);
      p[i][kk][2] = pack2<T>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
      p[i][kk][3] = pack2<T>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
    }
}

// o += P V for kM m-tiles, kN / 2 key steps of 16 and kD / 8 head-dim tiles.
template <class T, int kM, int kN, int kD, int kRowBytes>
__device__ __forceinline__ void gemm_pv(float (&o)[kM][kD / 8][4], const uint32_t (&p)[kM][kN / 2][4],
                                        uint32_t s_v, uint32_t v_lane) {
#pragma unroll
  for (int kk = 0; kk < kN / 2; ++kk)
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, s_v + chunk_step(v_lane, 2 * dp) + kk * 16 * kRowBytes);
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        mma_16816<T>(o[i][2 * dp], p[i][kk], b[0], b[1]);
        mma_16816<T>(o[i][2 * dp + 1], p[i][kk], b[2], b[3]);
      }
    }
}

// Scales row g of each m-tile by alpha[i][0] and row g + 8 by alpha[i][1].
template <int kM, int kDT>
__device__ __forceinline__ void scale_rows(float (&o)[kM][kDT][4], const float (&alpha)[kM][2]) {
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int j = 0; j < kDT; ++j) {
      o[i][j][0] *= alpha[i][0];
      o[i][j][1] *= alpha[i][0];
      o[i][j][2] *= alpha[i][1];
      o[i][j][3] *= alpha[i][1];
    }
}

}  // namespace tileattn::detail::sm80
