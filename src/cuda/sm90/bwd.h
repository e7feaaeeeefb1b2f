// bwd.h: the sm90 backward's entry point and parameters (host-only; no CUDA headers). What it
// accepts is in dispatch/cuda_limits.cc (sm90_backward_rejects); the preprocessing's lse2 and
// dsum rows come from the caller (cuda/backward.cc).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/kernel_params.h"
#include "cuda/sm80/bwd_params.h"
#include "cuda/sm90/bwd_layout.h"

namespace tileattn::detail::sm90 {

// The backward's tiles (bwd_kernel.cuh): one CTA = (batch, KV head, bwd_block_n(D) keys), two
// consumer warpgroups, walking every query head of the group and every block of
// bwd_block_m(D, window) query rows that sees the keys. At D = 64 and 128 each consumer owns 64
// of 128 keys: at D = 128 64 rows a step under a mask (a consumer's dK, dV, S^T and dP^T take 4
// x 64 of its 240 registers) and 80 without one (S^T and dP^T 40 each: the step's GEMMs 25% longer
// for the same synchronization, and their shared-memory operands read at 115 bytes a cycle
// instead of 128; dQ is then computed transposed, as no wgmma has M = 80); 128 at D = 64 (4 x 32
// + 2 x 32). At D = 256 (bwd_pair.cuh) both share 64 keys, one owning dV and the other dK (128
// registers each), 64 rows a step.
constexpr int bwd_block_n(int64_t head_dim) { return head_dim == 256 ? 64 : 128; }
constexpr int bwd_block_m(int64_t head_dim, bool window) {
  return head_dim == 64 ? 128 : head_dim == 128 && !window ? 80 : 64;
}
struct BwdParams {
  cuda::KernelParams f;  // q, k, v, out, lse, their strides, the sequences, mask and score transform
  void* dk;
  void* dv;
  int64_t dk_sb, dk_sl, dk_sh, dv_sb, dv_sl, dv_sh;  // q, k, v and dout are read through TMA maps
  // The preprocessing's fp32 rows [B, Hq, Lq]: lse2 = lse log2(e), dsum = rowsum(dO * O) - dlse.
  const float* lse2;
  const float* dsum;
  int64_t w_sb, w_sh;
  // dQ in fp32, tiles of block_m x D (dq_tiles: one a query block of a sequence and a
  // head, bwd_layout.h), zeroed before the launch; each CTA adds its part of every query block
  // it sees with one bulk reduction. A tile is 64 x 64 parts (D = 128 and 256: its 64-column
  // slices; D = 64: its row halves; block_m 80: 64 columns x 80 rows, transposed), each laid out
  // in the order of the wgmma accumulators that compute it, [8 or 10][128 threads][4]
  // (bwd_layout.h: dq_accum_pos), so the staging stores of a warp are 512 contiguous bytes; dq_from_accum
  // maps it back. deterministic: a counter a tile, zeroed, that orders those additions by key block.
  float* dq_accum;
  int* dq_order;
  DqTiles dq_tiles;
  int64_t batch, heads_kv;
  int64_t n_blocks;  // key blocks of bwd_block_n(D) of the longest sequence
  float scale;       // dQ = scale dS K, dK = scale dS^T Q
  // Deterministic mode without a mask, one CTA a tile: log2 of the (batch, KV head) pairs whose key
  // blocks the launch order interleaves (bwd_order.h: grouped_tile, det_pair_group_log2); a
  // divisor of the pairs; 0: none.
  int det_group_log2 = 0;
};

// The kernel's parameters for b, from the sm80 kernels' (the same preprocessing rows), but for
// dq_accum and dq_order: heads_q x dq_tiles.head_blocks tiles of block_m x D floats and as many
// ints, zeroed, which the caller allocates (cuda/backward.cc).
inline BwdParams bwd_params(const BackwardParams& b, const sm80::BwdKernelParams& k) {
  const AttnParams& p = b.fwd;
  BwdParams kp{};
  kp.f = k.f;
  kp.dk = b.dk, kp.dv = b.dv;
  kp.dk_sb = k.dk_sb, kp.dk_sl = k.dk_sl, kp.dk_sh = k.dk_sh;
  kp.dv_sb = k.dv_sb, kp.dv_sl = k.dv_sl, kp.dv_sh = k.dv_sh;
  kp.lse2 = k.lse2, kp.dsum = k.dsum, kp.w_sb = k.w_sb, kp.w_sh = k.w_sh;
  kp.batch = p.batch, kp.heads_kv = p.heads_kv, kp.scale = p.scale;
  const int block_n = bwd_block_n(p.head_dim);
  kp.n_blocks = (p.seqlen_k + block_n - 1) / block_n;
  const int block_m = bwd_block_m(p.head_dim, p.has_window());
  kp.dq_tiles = DqTiles::make(p.seqs.cu_q, p.batch, (p.seqlen_q + block_m - 1) / block_m, p.total_q, block_m);
  return kp;
}

// dK and dV written, dq_accum summed (the caller converts it into dq: dq_from_accum).
void backward(const BackwardParams& b, const BwdParams& kp);

// dq[b, l, h, :] = scale * dQ's sum at (b, h, l) in dq's dtype and strides.
void dq_from_accum(const BackwardParams& b, const BwdParams& kp);

}  // namespace tileattn::detail::sm90
