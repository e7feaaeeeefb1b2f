// bwd_params.h: what the sm80 backward kernels read (the forward's KernelParams plus the
// gradients and the preprocessing's per-row values), derived once on the host, and the
// backward's tile sizes.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/kernel_params.h"

namespace tileattn::detail::sm80 {

// The backward's tiles. The dK/dV kernel: one CTA = (batch, KV head, block_n keys); each warp
// owns 16 keys and keeps their dK and dV in registers while the CTA walks every query head of
// the group and every block of block_m query rows that sees its keys. The dQ kernel: one CTA =
// (batch, query head, block_m rows), each warp 16 rows, walking the key blocks they see.
// - block_m = block_n = 64, 4 warps: at D = 128 a dK/dV warp holds dK and dV (2 x 64 floats) and
//   S^T and dP^T of a step (2 x 32); larger blocks would spill.
// - D = 256: dK and dV would take 256 registers, so they are computed in two passes (dV, then dK),
//   each recomputing S^T.
// - Shared memory, dK/dV kernel: K and V (the CTA's keys), 2 stages x {Q, dO} and 2 stages x
//   {lse2, dsum}: 97 KB at D = 128 (rows stored as 128 elements), 2 CTAs an SM on Hopper (one on
//   an A100); 193 KB at D = 256, which needs Hopper's 227 KB (an A100 opts in to 163 KB, as for
//   the forward's D = 256). dQ kernel: Q and dO, 2 stages x {K, V}: 96 KB at D = 128.
struct BwdTiles {
  int head_dim;
  static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 4;
  constexpr int threads() const { return kWarps * 32; }
  constexpr int smem_row() const { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }
  constexpr int row_bytes() const { return smem_row() * 2; }
  constexpr int tile_bytes() const { return 64 * row_bytes(); }  // kBlockM == kBlockN rows
  constexpr bool two_passes() const { return head_dim > 128; }
  // dK/dV kernel: K, V, then 2 x {Q, dO}, then 2 x {lse2, dsum} floats.
  constexpr int dkdv_smem() const { return 2 * tile_bytes() + 2 * 2 * tile_bytes() + 2 * 2 * kBlockM * 4; }
  // dQ kernel: Q, dO, then 2 x {K, V}.
  constexpr int dq_smem() const { return 2 * tile_bytes() + 2 * 2 * tile_bytes(); }
};

// Which accumulators a dK/dV launch computes.
enum class BwdPass : int { kBoth, kDv, kDk };

struct BwdKernelParams {
  cuda::KernelParams f;  // q, k, v, out, lse, their strides, the sequences, mask and score transform
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  const float* dlse;  // may be null
  int64_t do_sb, do_sl, do_sh, dq_sb, dq_sl, dq_sh, dk_sb, dk_sl, dk_sh, dv_sb, dv_sl, dv_sh;
  int64_t dl_sb, dl_sh, dl_sl;
  // The preprocessing's fp32 rows [PB, Hq, PL] (PB = 1 and PL = total_q for a packed q):
  // lse2 = lse log2(e) (0 for a row that sees no key) and dsum = rowsum(dO * O) - dlse.
  float* lse2;
  float* dsum;
  int64_t w_sb, w_sh;  // their batch and head strides (row stride 1)
  int64_t part_batch;  // PB
  int64_t part_len;    // PL
  int64_t batch, heads_kv;
  int64_t n_blocks;  // key blocks of the longest sequence (dK/dV grid: n_blocks * heads_kv * batch)
  int64_t m_blocks;  // query blocks of the longest sequence (dQ grid: m_blocks * heads_q * batch)
  float scale;       // dQ = scale dS K, dK = scale dS^T Q
};

inline BwdKernelParams make_bwd_params(const BackwardParams& b, float* lse2, float* dsum) {
  const AttnParams& p = b.fwd;
  BwdKernelParams k{};
  k.f = cuda::make_kernel_params(p, BwdTiles::kBlockM);
  k.dout = b.dout, k.dq = b.dq, k.dk = b.dk, k.dv = b.dv;
  k.dlse = static_cast<const float*>(b.dlse);
  k.do_sb = b.dout_stride.b, k.do_sl = b.dout_stride.l, k.do_sh = b.dout_stride.h;
  k.dq_sb = b.dq_stride.b, k.dq_sl = b.dq_stride.l, k.dq_sh = b.dq_stride.h;
  k.dk_sb = b.dk_stride.b, k.dk_sl = b.dk_stride.l, k.dk_sh = b.dk_stride.h;
  k.dv_sb = b.dv_stride.b, k.dv_sl = b.dv_stride.l, k.dv_sh = b.dv_stride.h;
  k.dl_sb = b.dlse_stride.b, k.dl_sh = b.dlse_stride.h, k.dl_sl = b.dlse_stride.l;
  k.lse2 = lse2, k.dsum = dsum;
  k.part_batch = p.part_batch(), k.part_len = p.part_len();
  k.w_sh = k.part_len, k.w_sb = p.seqs.varlen_q() ? 0 : p.heads_q * k.part_len;
  k.batch = p.batch, k.heads_kv = p.heads_kv;
  k.n_blocks = (p.seqlen_k + BwdTiles::kBlockN - 1) / BwdTiles::kBlockN;
  k.m_blocks = (p.seqlen_q + BwdTiles::kBlockM - 1) / BwdTiles::kBlockM;
  k.scale = p.scale;
  return k;
}

}  // namespace tileattn::detail::sm80
