// kernel.cuh: the sm80 forward kernel (mma.sync, cp.async, ldmatrix): wiring of the tile
// scheduler, the mainloop (K/V ring, two warp GEMMs, online softmax) and the epilogue.
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "cuda/common/kernel_params.h"
#include "cuda/sm80/epilogue.h"
#include "cuda/sm80/ptx.h"
#include "cuda/sm80/scores.h"
#include "cuda/sm80/smem_tile.h"
#include "cuda/sm80/tile_config.h"
#include "cuda/sm80/warp_mma.h"
#include "cuda/sm80/warp_softmax.h"

namespace tileattn::detail::sm80 {

using cuda::KernelParams;

// Which (batch, head, query tile, split) a CTA computes. The grid is 1-D (up to 2^31 - 1 CTAs,
// so any B * H works), splits fastest, then query tiles, so CTAs that run together share K and V
// in L2, and in reverse order: under a causal mask the last tiles see the most keys and should
// start first.
struct TileCoord {
  int64_t batch, head, m_block;
  int split;
};

__device__ __forceinline__ TileCoord tile_coord(int64_t linear, const KernelParams& p) {
  const int split = static_cast<int>(linear % p.splits);
  const int64_t tile = linear / p.splits, bh = tile / p.m_blocks;
  return TileCoord{bh / p.heads_q, bh % p.heads_q, p.m_blocks - 1 - tile % p.m_blocks, split};
}

// Shared memory: the Q tile [block_m][row], then `stages` x {K [block_n][row], V [block_n][row]},
// all swizzled (smem_tile.h). The Q tile later stages O.
// Tiles is a type whose static member kCfg is the TileConfig (a type, not the value, because
// kernels with class-type template arguments do not get host stubs). kCache: a KV cache's rows
// (kv_batch_idx, a page table; forward_kvcache), compiled apart so that the other kernels keep
// their registers (a runtime branch made ptxas spill in their mainloops).
template <class Tiles, class T, class Mask, bool kCache>
__global__ void __launch_bounds__(Tiles::kCfg.threads(), Tiles::kCfg.min_blocks)
    attention_fwd_sm80(const KernelParams p) {
  constexpr TileConfig kCfg = Tiles::kCfg;
  constexpr int kM = kCfg.m_tiles();    // m16 tiles per warp
  constexpr int kN = kCfg.block_n / 8;  // n8 key tiles per block
  constexpr int kD = kCfg.head_dim;
  constexpr int kDT = kD / 8;  // n8 head-dim tiles of O = 16-byte chunks per row
  constexpr int kRB = kCfg.row_bytes();
  constexpr int kStages = kCfg.stages;
  constexpr int kThreads = kCfg.threads();
  static_assert(kCfg.warp_rows() % 16 == 0 && kCfg.block_n % 16 == 0 && kD % 16 == 0, "mma tile multiples");
  static_assert(kStages >= 2, "the ring needs a stage to compute and one to load");

  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_row0 = warp * kCfg.warp_rows();

  // Scheduler: this CTA's tile, its sequence (lengths, mask) and the key blocks its rows see.
  const TileCoord tile = tile_coord(blockIdx.x, p);
  const SeqInfo seq = seq_info(p.seqs, tile.batch);
  // Sequence positions and block indices fit in int (seqlens <= 2^30, cuda_limits.cc); memory
  // offsets are 64-bit.
  const TileBand band = tile_band<Mask>(seq.len_q, seq.len_k, p.window_left, p.window_right);
  const int q0 = static_cast<int>(tile.m_block) * kCfg.block_m;
  if (q0 >= seq.len_q) return;  // past this sequence's rows (varlen batches): nothing to write
  const int q_rows = min(kCfg.block_m, static_cast<int>(seq.len_q) - q0);
  int n_begin, n_end;
  {
    int nb, ne;
    band.key_blocks(q0, q0 + q_rows, kCfg.block_n, &nb, &ne);
    int64_t begin, end;
    split_blocks(nb, ne, p.splits, tile.split, &begin, &end);
    n_begin = static_cast<int>(begin), n_end = static_cast<int>(end);
  }

  const int64_t head_kv = tile.head / p.group;  // GQA/MQA: K and V are read in place
  const int64_t q_row0 = seq.q_start + q0;      // this tile's first row in q, out and the LSE
  const T* q = static_cast<const T*>(p.q) + tile.batch * p.q_sb + tile.head * p.q_sh + q_row0 * p.q_sl;
  // K and V from the first key of this batch entry (a KV cache's row kv_batch_idx[b]); a paged
  // cache is read row by row through the page table instead (load_kv).
  int64_t kv_batch = tile.batch;
  if constexpr (kCache) kv_batch = p.kv_batch_idx != nullptr ? p.kv_batch_idx[tile.batch] : tile.batch;
  const T* k = static_cast<const T*>(p.k) + kv_batch * p.k_sb + head_kv * p.k_sh + seq.k_start * p.k_sl;
  const T* v = static_cast<const T*>(p.v) + kv_batch * p.v_sb + head_kv * p.v_sh + seq.k_start * p.v_sl;

  const uint32_t s_q = smem_u32(smem);
  const uint32_t s_kv = s_q + kCfg.q_bytes();
  // Block n's keys into ring stage `stage`; rows past the sequence's keys are zero-filled (V must
  // be finite there: a masked weight of 0 times garbage, or another sequence's NaN, is NaN).
  auto load_kv = [&](int stage, int n) {
    const int k0 = n * kCfg.block_n;
    const int rows = min(kCfg.block_n, band.len_k - k0);
    const uint32_t s_k = s_kv + stage * kCfg.stage_bytes();
    if (kCache && p.page_table != nullptr) {
      // What the paged rows need is rebuilt here from the CTA index and the parameters (the
      // empty asm keeps the compiler from hoisting it out of the mainloop) instead of being
      // held in registers across it. Which costs less, these few divisions per key block or
      // the registers (ptxas spills either way at D = 128), is still to be measured on a GPU.
      int64_t linear = blockIdx.x;
      asm volatile("" : "+l"(linear));
      const TileCoord at = tile_coord(linear, p);
      const int64_t hk = at.head / p.group;
      const int32_t* pages = p.page_table + at.batch * p.page_table_stride;
      const int pos0 = static_cast<int>(seq_info(p.seqs, at.batch).k_start) + k0;
      load_tile_paged<kCfg.block_n, kRB, kThreads>(
          s_k, PagedRows<T>{static_cast<const T*>(p.k) + hk * p.k_sh, p.k_sb, p.k_sl, pages, p.page_size},
          pos0, rows, p.d_chunks, tid);
      load_tile_paged<kCfg.block_n, kRB, kThreads>(
          s_k + kCfg.kv_tile_bytes(),
          PagedRows<T>{static_cast<const T*>(p.v) + hk * p.v_sh, p.v_sb, p.v_sl, pages, p.page_size}, pos0,
          rows, p.d_chunks, tid);
      return;
    }
    load_tile_async<kCfg.block_n, kRB, kThreads>(s_k, k + int64_t{k0} * p.k_sl, p.k_sl, rows, p.d_chunks,
                                                 tid);
    load_tile_async<kCfg.block_n, kRB, kThreads>(s_k + kCfg.kv_tile_bytes(), v + int64_t{k0} * p.v_sl, p.v_sl,
                                                 rows, p.d_chunks, tid);
  };

  // Prologue: Q, then the first stages - 1 key blocks, one commit group each (empty groups keep
  // the count uniform when there are fewer blocks).
  load_tile_async<kCfg.block_m, kRB, kThreads>(s_q, q, p.q_sl, q_rows, p.d_chunks, tid);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (n_begin + s < n_end) load_kv(s, n_begin + s);
    cp_async_commit();
  }

  const uint32_t q_lane = LaneAddr<kRB>::q(warp_row0, lane);  // offsets within their tiles
  const uint32_t k_lane = LaneAddr<kRB>::k(lane);
  const uint32_t v_lane = LaneAddr<kRB>::v(lane);
  const int lane_row0 = q0 + warp_row0 + (lane >> 2);  // this lane's row g of m-tile 0

  float o[kM][kDT][4];
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int j = 0; j < kDT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][j][e] = 0.0f;
  WarpSoftmax<kM, kN> softmax;

  // Mainloop: one key block per step.
  for (int n = n_begin; n < n_end; ++n) {
    const int step = n - n_begin;
    cp_async_wait<kStages - 2>();  // Q and block n have landed (this thread's copies) ...
    __syncthreads();               // ... everyone's, and everyone is done with block n - 1's stage
    if (n + kStages - 1 < n_end) load_kv((step + kStages - 1) % kStages, n + kStages - 1);
    cp_async_commit();

    const uint32_t s_stage = s_kv + (step % kStages) * kCfg.stage_bytes();
    float s[kM][kN][4];
    gemm_qk<T, kM, kN, kD, kRB>(s, s_q, q_lane, s_stage, k_lane);
    transform_scores(s, p.transform, p.pre);
    const int k0 = n * kCfg.block_n;
    if (band.needs_mask(q0, q0 + q_rows, k0, kCfg.block_n, Mask::kMasks))
      apply_band(s, lane_row0 - k0 + band.lo, lane_row0 - k0 + band.hi, band.len_k - k0, lane & 3);

    float alpha[kM][2];
    if (softmax.advance(s, p.post, p.conditional, alpha)) scale_rows(o, alpha);
    softmax.exponentiate(s, p.post);
    uint32_t p_frag[kM][kN / 2][4];
    pack_p<T>(s, p_frag);
    gemm_pv<T, kM, kN, kD, kRB>(o, p_frag, s_stage + kCfg.kv_tile_bytes(), v_lane);
  }
  if (n_begin >= n_end) {  // no key block: Q's copies may still be landing in the staging area
    cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue: each row written once.
  softmax.finish();
  float inv_l[kM][2];
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) inv_l[i][h] = softmax.row[i][h].inv_l();
  const int warp_valid_rows = max(0, min(kCfg.warp_rows(), q_rows - warp_row0));
  if (p.splits > 1) {  // this split's partial state: fp32 O / l and the LSE of every row
    const int64_t pb = p.seqs.varlen_q() ? 0 : tile.batch;
    float* o_part =
        p.o_part + tile.split * p.op_ss + pb * p.op_sb + tile.head * p.op_sh + (q_row0 + warp_row0) * p.op_sl;
    float* lse_part = p.lse_part + tile.split * p.lp_ss + pb * p.lp_sb + tile.head * p.lp_sh + q_row0;
    store_partial<kM, kDT>(o, inv_l, softmax.row, o_part, p.op_sl, lse_part + warp_row0, warp_valid_rows,
                           p.d_chunks, lane);
    return;
  }
  T* out = static_cast<T*>(p.out) + tile.batch * p.o_sb + tile.head * p.o_sh + (q_row0 + warp_row0) * p.o_sl;
  store_o<T, kM, kDT, kRB>(o, inv_l, smem + warp_row0 * kRB, out, p.o_sl, warp_valid_rows, p.d_chunks, lane);

  if (p.lse != nullptr && (lane & 3) == 0) {
    float* lse = p.lse + tile.batch * p.lse_sb + tile.head * p.lse_sh + q_row0 * p.lse_sl;
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = lane_row0 + 16 * i + 8 * h - q0;  // within the tile
        if (row < q_rows) lse[int64_t{row} * p.lse_sl] = softmax.row[i][h].lse();
      }
  }
}

}  // namespace tileattn::detail::sm80
