// bwd_kernel.cuh: the sm80 backward kernels (mma.sync, cp.async, ldmatrix), DESIGN.md section 7,
// deterministic by construction (no atomics: every gradient element is summed by one warp in a
// fixed order):
//   dK/dV kernel, per (batch, KV head, 64 keys), walking the group's query heads and the query
//     blocks that see the keys:  S^T = K Q^T, P^T = exp2(S^T post - lse2), dP^T = V dO^T,
//     dS^T = P^T (dP^T - dsum) (softcap: times 1 - tanh^2), dV += P^T dO, dK += dS^T Q;
//   dQ kernel, per (batch, query head, 64 rows), walking the key blocks the rows see:
//     S = Q K^T, dP = dO V^T, dS as above, dQ += dS K.
// Each GEMM is one of the forward's two warp GEMMs (warp_mma.h) with other tiles in the operand
// roles: A from a tile's warp rows, B "as K" (Q K^T) or "as V" (P V, ldmatrix.trans).
// Entries the mask hides get P = dS = 0 whatever dP holds. The products after that multiply
// whole 64 x 64 blocks, so a NaN in K, Q or dO at a position the mask hides from some rows of a
// block still reaches those rows' (keys') gradients through 0 x NaN, as in flash-attn; positions
// past a sequence's length are never read (their tiles are zero-filled).
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "cuda/sm80/bwd_params.h"
#include "cuda/sm80/ptx.h"
#include "cuda/sm80/scores.h"
#include "cuda/sm80/smem_tile.h"
#include "cuda/sm80/warp_mma.h"

namespace tileattn::detail::sm80 {

// Sets the entries of kN column tiles outside [lo0, min(hi0, limit)) (lane row g; the row 8
// below shifts both edges by 8) to `fill`: apply_band's rule with any fill value.
template <int kN>
__device__ __forceinline__ void fill_outside_band(float (&s)[1][kN][4], int lo0, int hi0, int limit, int t,
                                                  float fill) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int lo = lo0 + 8 * h, hi = min(hi0 + 8 * h, limit);
#pragma unroll
    for (int j = 0; j < kN; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + 2 * t + e;
        if (col < lo || col >= hi) s[0][j][2 * h + e] = fill;
      }
  }
}

// dp' = (dp - dsum) (times 1 - t^2 for a softcap, where s holds t = tanh), then s = P and
// dp = dS = P dp'. The row (or column) values come from `row_value(h, j, e)`.
template <int kN, class Lse2, class Dsum>
__device__ __forceinline__ void softmax_grad(float (&s)[1][kN][4], float (&dp)[1][kN][4], float post,
                                             bool softcap, Lse2 lse2, Dsum dsum) {
#pragma unroll
  for (int j = 0; j < kN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float t = s[0][j][e];
      float g = dp[0][j][e] - dsum(j, e);
      if (softcap) g *= 1.0f - t * t;
      const float prob = ex2(fmaf(t, post, -lse2(j, e)));
      s[0][j][e] = prob;
      dp[0][j][e] = prob * g;
    }
}

// A warp's 16 accumulator rows times `mul` in T, through shared memory (this warp's own rows
// of a tile it is done with) to 16-byte global stores; rows >= valid_rows and chunks >= d_chunks
// are not written.
template <class T, int kDT, int kRowBytes>
__device__ __forceinline__ void store_rows(const float (&acc)[1][kDT][4], float mul, unsigned char* s_rows,
                                           T* out, int64_t row_stride, int valid_rows, int d_chunks,
                                           int lane) {
  const int g = lane >> 2, t = lane & 3;
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kDT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(s_rows + swizzled<kRowBytes>(8 * h + g, j) + 4 * t) =
          pack2<T>(acc[0][j][2 * h] * mul, acc[0][j][2 * h + 1] * mul);
  __syncwarp();
#pragma unroll
  for (int idx = lane; idx < 16 * kDT; idx += 32) {
    const int r = idx / kDT, c = idx % kDT;
    if (r < valid_rows && c < d_chunks)
      *reinterpret_cast<uint4*>(out + r * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(s_rows + swizzled<kRowBytes>(r, c));
  }
}

// load_tile_async, also where threads / chunks per row is not a multiple of 8 rows (D = 256 with
// 4 warps): then each copy computes its own row, chunk and swizzle.
template <int kRows, int kRowBytes, int kThreads, class T>
__device__ __forceinline__ void load_tile(uint32_t tile, const T* src, int64_t row_stride, int valid_rows,
                                          int valid_chunks, int tid) {
  constexpr int kChunks = kRowBytes / 16;
  if constexpr (kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0) {
    load_tile_async<kRows, kRowBytes, kThreads>(tile, src, row_stride, valid_rows, valid_chunks, tid);
  } else {
#pragma unroll 4
    for (int idx = tid; idx < kRows * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool valid = r < valid_rows && c < valid_chunks;
      cp_async_16(tile + swizzled<kRowBytes>(r, c), valid ? src + r * row_stride + c * 8 : src, valid);
    }
  }
}

template <int kDT>
__device__ __forceinline__ void zero(float (&acc)[1][kDT][4]) {
#pragma unroll
  for (int j = 0; j < kDT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][j][e] = 0.0f;
}

// Tiles is a type whose static member kCfg is the BwdTiles.
template <class Tiles, class T, class Mask, BwdPass kPass>
__global__ void __launch_bounds__(Tiles::kCfg.threads()) attention_bwd_dkdv_sm80(const BwdKernelParams p) {
  constexpr BwdTiles kCfg = Tiles::kCfg;
  constexpr int kD = kCfg.head_dim, kDT = kD / 8, kRB = kCfg.row_bytes(), kTile = kCfg.tile_bytes();
  constexpr int kBM = BwdTiles::kBlockM, kBN = BwdTiles::kBlockN, kN = kBM / 8, kThreads = kCfg.threads();
  constexpr bool kDk = kPass != BwdPass::kDv, kDv = kPass != BwdPass::kDk;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const cuda::KernelParams& f = p.f;

  // This CTA's keys and the query rows that see them (with every query head of the group).
  const int64_t linear = blockIdx.x;
  const int n_block = static_cast<int>(linear % p.n_blocks);
  const int64_t head_kv = (linear / p.n_blocks) % p.heads_kv, batch = linear / p.n_blocks / p.heads_kv;
  const SeqInfo seq = seq_info(f.seqs, batch);
  const int len_q = static_cast<int>(seq.len_q), len_k = static_cast<int>(seq.len_k);
  const int k0 = n_block * kBN;
  if (k0 >= len_k) return;  // past this sequence's keys: nothing to write
  const int k_rows = min(kBN, len_k - k0);
  const TileBand band = tile_band<Mask>(len_q, len_k, f.window_left, f.window_right);
  int q_begin = 0, q_end = 0;
  if (len_q > 0) band.query_rows(k0, k0 + k_rows, len_q, &q_begin, &q_end);
  const int m_begin = q_begin / kBM, m_per_head = q_end > q_begin ? (q_end + kBM - 1) / kBM - m_begin : 0;
  const int64_t steps = m_per_head * f.group;  // can pass 2^31 at long sequences and wide groups

  const T* k = static_cast<const T*>(f.k) + batch * f.k_sb + head_kv * f.k_sh + (seq.k_start + k0) * f.k_sl;
  const T* v = static_cast<const T*>(f.v) + batch * f.v_sb + head_kv * f.v_sh + (seq.k_start + k0) * f.v_sl;
  const uint32_t s_k = smem_u32(smem), s_v = s_k + kTile, s_stages = s_v + kTile;
  float* s_rowvals = reinterpret_cast<float*>(smem + 6 * kTile);  // [stage][lse2 | dsum][kBM]

  // Step i: query head (group member i / m_per_head), query block m_begin + i % m_per_head.
  auto load_step = [&](int64_t i) {
    const int stage = i & 1;
    const int64_t h = head_kv * f.group + i / m_per_head;
    const int q0 = (m_begin + static_cast<int>(i % m_per_head)) * kBM, rows = min(kBM, len_q - q0);
    const int64_t row0 = seq.q_start + q0;
    const T* q = static_cast<const T*>(f.q) + batch * f.q_sb + h * f.q_sh + row0 * f.q_sl;
    const T* dout = static_cast<const T*>(p.dout) + batch * p.do_sb + h * p.do_sh + row0 * p.do_sl;
    const uint32_t s_q = s_stages + stage * 2 * kTile;
    load_tile<kBM, kRB, kThreads>(s_q, q, f.q_sl, rows, f.d_chunks, tid);
    load_tile<kBM, kRB, kThreads>(s_q + kTile, dout, p.do_sl, rows, f.d_chunks, tid);
    // The rows' lse2 and dsum (0 past the sequence: those columns are masked anyway).
    float* vals = s_rowvals + stage * 2 * kBM;
    const int64_t w = batch * p.w_sb + h * p.w_sh + row0;
    for (int r = tid; r < 2 * kBM; r += kThreads) {
      const int row = r % kBM;
      vals[r] = row < rows ? (r < kBM ? p.lse2 : p.dsum)[w + row] : 0.0f;
    }
  };

  load_tile<kBN, kRB, kThreads>(s_k, k, f.k_sl, k_rows, f.d_chunks, tid);
  load_tile<kBN, kRB, kThreads>(s_v, v, f.v_sl, k_rows, f.d_chunks, tid);
  cp_async_commit();
  if (steps > 0) load_step(0);
  cp_async_commit();

  const uint32_t a_lane = LaneAddr<kRB>::q(warp * 16, lane);  // K and V rows of this warp, as A
  const uint32_t b_lane = LaneAddr<kRB>::k(lane);             // Q and dO as B of a Q K^T GEMM
  const uint32_t t_lane = LaneAddr<kRB>::v(lane);             // Q and dO as B of a P V GEMM
  const int key_row = k0 + warp * 16 + g;                     // this lane's key of row g
  float dk[1][kDk ? kDT : 1][4], dv[1][kDv ? kDT : 1][4];
  zero(dk), zero(dv);

  for (int64_t i = 0; i < steps; ++i) {
    cp_async_wait<0>();
    __syncthreads();  // step i's tiles and values are in; everyone is done with step i - 1's stage
    if (i + 1 < steps) load_step(i + 1);
    cp_async_commit();

    const int stage = i & 1;
    const uint32_t s_q = s_stages + stage * 2 * kTile, s_do = s_q + kTile;
    const float* lse2 = s_rowvals + stage * 2 * kBM;
    const float* dsum = lse2 + kBM;
    const int q0 = (m_begin + static_cast<int>(i % m_per_head)) * kBM;
    float s[1][kN][4], dp[1][kN][4];
    if constexpr (kDk) gemm_qk<T, 1, kN, kD, kRB>(dp, s_v, a_lane, s_do, b_lane);  // dP^T = V dO^T
    gemm_qk<T, 1, kN, kD, kRB>(s, s_k, a_lane, s_q, b_lane);                       // S^T = K Q^T
    transform_scores(s, f.transform, f.pre);
    // Rows are keys, columns queries: key j is seen by query i iff j - hi < i <= j - lo.
    const bool masked = q0 + kBM > len_q || band.needs_mask(q0, min(q0 + kBM, len_q), k0, kBN, Mask::kMasks);
    const int lo0 = key_row - band.hi + 1 - q0, hi0 = key_row - band.lo + 1 - q0;
    if (masked) fill_outside_band(s, lo0, hi0, len_q - q0, t, -INFINITY);
    if constexpr (kDk) {
      softmax_grad(
          s, dp, f.post, f.transform == cuda::ScoreTransform::kSoftcap,
          [&](int j, int e) { return lse2[8 * j + 2 * t + (e & 1)]; },
          [&](int j, int e) { return dsum[8 * j + 2 * t + (e & 1)]; });
      if (masked) fill_outside_band(dp, lo0, hi0, len_q - q0, t, 0.0f);
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[0][j][e] = ex2(fmaf(s[0][j][e], f.post, -lse2[8 * j + 2 * t + (e & 1)]));
    }
    uint32_t frag[1][kN / 2][4];
    if constexpr (kDv) {
      pack_p<T>(s, frag);
      gemm_pv<T, 1, kN, kD, kRB>(dv, frag, s_do, t_lane);  // dV += P^T dO
    }
    if constexpr (kDk) {
      pack_p<T>(dp, frag);
      gemm_pv<T, 1, kN, kD, kRB>(dk, frag, s_q, t_lane);  // dK += dS^T Q
    }
  }
  if (steps == 0) {  // K and V may still be landing (any thread's copies) in the staging rows
    cp_async_wait<0>();
    __syncthreads();
  }

  // Each warp stages its own 16 rows of K (dK) and V (dV).
  const int valid = max(0, min(16, k_rows - warp * 16));
  const int64_t key0 = seq.k_start + k0 + warp * 16;
  if constexpr (kDk) {
    T* out = static_cast<T*>(p.dk) + batch * p.dk_sb + head_kv * p.dk_sh + key0 * p.dk_sl;
    store_rows<T, kDT, kRB>(dk, p.scale, smem + warp * 16 * kRB, out, p.dk_sl, valid, f.d_chunks, lane);
  }
  if constexpr (kDv) {
    T* out = static_cast<T*>(p.dv) + batch * p.dv_sb + head_kv * p.dv_sh + key0 * p.dv_sl;
    store_rows<T, kDT, kRB>(dv, 1.0f, smem + kTile + warp * 16 * kRB, out, p.dv_sl, valid, f.d_chunks, lane);
  }
}

template <class Tiles, class T, class Mask>
__global__ void __launch_bounds__(Tiles::kCfg.threads()) attention_bwd_dq_sm80(const BwdKernelParams p) {
  constexpr BwdTiles kCfg = Tiles::kCfg;
  constexpr int kD = kCfg.head_dim, kDT = kD / 8, kRB = kCfg.row_bytes(), kTile = kCfg.tile_bytes();
  constexpr int kBM = BwdTiles::kBlockM, kBN = BwdTiles::kBlockN, kN = kBN / 8, kThreads = kCfg.threads();
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const cuda::KernelParams& f = p.f;

  const int64_t linear = blockIdx.x;
  const int m_block = static_cast<int>(p.m_blocks - 1 - linear % p.m_blocks);  // long causal rows first
  const int64_t head = (linear / p.m_blocks) % f.heads_q, batch = linear / p.m_blocks / f.heads_q;
  const SeqInfo seq = seq_info(f.seqs, batch);
  const int len_q = static_cast<int>(seq.len_q), len_k = static_cast<int>(seq.len_k);
  const int q0 = m_block * kBM;
  if (q0 >= len_q) return;
  const int q_rows = min(kBM, len_q - q0);
  const TileBand band = tile_band<Mask>(len_q, len_k, f.window_left, f.window_right);
  int n_begin = 0, n_end = 0;
  band.key_blocks(q0, q0 + q_rows, kBN, &n_begin, &n_end);

  const int64_t head_kv = head / f.group, row0 = seq.q_start + q0;
  const T* q = static_cast<const T*>(f.q) + batch * f.q_sb + head * f.q_sh + row0 * f.q_sl;
  const T* dout = static_cast<const T*>(p.dout) + batch * p.do_sb + head * p.do_sh + row0 * p.do_sl;
  const T* k = static_cast<const T*>(f.k) + batch * f.k_sb + head_kv * f.k_sh + seq.k_start * f.k_sl;
  const T* v = static_cast<const T*>(f.v) + batch * f.v_sb + head_kv * f.v_sh + seq.k_start * f.v_sl;
  const uint32_t s_q = smem_u32(smem), s_do = s_q + kTile, s_stages = s_do + kTile;
  auto load_kv = [&](int stage, int n) {
    const int kb = n * kBN, rows = min(kBN, len_k - kb);
    const uint32_t s_k = s_stages + stage * 2 * kTile;
    load_tile<kBN, kRB, kThreads>(s_k, k + int64_t{kb} * f.k_sl, f.k_sl, rows, f.d_chunks, tid);
    load_tile<kBN, kRB, kThreads>(s_k + kTile, v + int64_t{kb} * f.v_sl, f.v_sl, rows, f.d_chunks, tid);
  };
  load_tile<kBM, kRB, kThreads>(s_q, q, f.q_sl, q_rows, f.d_chunks, tid);
  load_tile<kBM, kRB, kThreads>(s_do, dout, p.do_sl, q_rows, f.d_chunks, tid);
  cp_async_commit();
  if (n_begin < n_end) load_kv(0, n_begin);
  cp_async_commit();

  // This lane's two rows (g and g + 8 of the warp's 16): their lse2 and dsum.
  const int lane_row = warp * 16 + g;
  float lse2[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = lane_row + 8 * h;
    const int64_t w = batch * p.w_sb + head * p.w_sh + row0 + r;
    lse2[h] = r < q_rows ? p.lse2[w] : 0.0f;
    dsum[h] = r < q_rows ? p.dsum[w] : 0.0f;
  }
  const uint32_t a_lane = LaneAddr<kRB>::q(warp * 16, lane);
  const uint32_t k_lane = LaneAddr<kRB>::k(lane), v_lane = LaneAddr<kRB>::v(lane);
  float dq[1][kDT][4];
  zero(dq);

  for (int n = n_begin; n < n_end; ++n) {
    const int step = n - n_begin;
    cp_async_wait<0>();
    __syncthreads();
    if (n + 1 < n_end) load_kv((step + 1) & 1, n + 1);
    cp_async_commit();

    const uint32_t s_k = s_stages + (step & 1) * 2 * kTile, s_v = s_k + kTile;
    float s[1][kN][4], dp[1][kN][4];
    gemm_qk<T, 1, kN, kD, kRB>(dp, s_do, a_lane, s_v, k_lane);  // dP = dO V^T
    gemm_qk<T, 1, kN, kD, kRB>(s, s_q, a_lane, s_k, k_lane);    // S = Q K^T
    transform_scores(s, f.transform, f.pre);
    const int kb = n * kBN;
    const bool masked = band.needs_mask(q0, q0 + q_rows, kb, kBN, Mask::kMasks);
    const int row = q0 + lane_row;
    if (masked) fill_outside_band(s, row - kb + band.lo, row - kb + band.hi, len_k - kb, t, -INFINITY);
    softmax_grad(
        s, dp, f.post, f.transform == cuda::ScoreTransform::kSoftcap,
        [&](int, int e) { return lse2[e >> 1]; }, [&](int, int e) { return dsum[e >> 1]; });
    if (masked) fill_outside_band(dp, row - kb + band.lo, row - kb + band.hi, len_k - kb, t, 0.0f);
    uint32_t frag[1][kN / 2][4];
    pack_p<T>(dp, frag);
    gemm_pv<T, 1, kN, kD, kRB>(dq, frag, s_k, v_lane);  // dQ += dS K
  }
  if (n_begin >= n_end) {  // no key block: Q's copies may still be landing in the staging rows
    cp_async_wait<0>();
    __syncthreads();
  }

  T* out = static_cast<T*>(p.dq) + batch * p.dq_sb + head * p.dq_sh + (row0 + warp * 16) * p.dq_sl;
  const int valid = max(0, min(16, q_rows - warp * 16));
  store_rows<T, kDT, kRB>(dq, p.scale, smem + warp * 16 * kRB, out, p.dq_sl, valid, f.d_chunks, lane);
}

}  // namespace tileattn::detail::sm80
