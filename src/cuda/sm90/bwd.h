// bwd.h: the sm90 backward's entry point and parameters (host-only; no CUDA headers). What it
// accepts is in dispatch/cuda_limits.cc (sm90_backward_rejects); the preprocessing's lse2 and
// dsum rows come from the caller (cuda/backward.cc).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/kernel_params.h"

namespace tileattn::detail::sm90 {

// The backward's tiles (bwd_kernel.cuh): one CTA = (batch, KV head, kBwdBlockN keys), two
// consumer warpgroups of 64 keys each, walking every query head of the group and every block of
// kBwdBlockM query rows that sees the keys.
inline constexpr int kBwdBlockM = 64, kBwdBlockN = 128;

struct BwdParams {
  cuda::KernelParams f;  // q, k, v, out, lse, their strides, the sequences, mask and score transform
  void* dk;
  void* dv;
  int64_t dk_sb, dk_sl, dk_sh, dv_sb, dv_sl, dv_sh;  // q, k, v and dout are read through TMA maps
  // The preprocessing's fp32 rows [B, Hq, Lq]: lse2 = lse log2(e), dsum = rowsum(dO * O) - dlse.
  const float* lse2;
  const float* dsum;
  int64_t w_sb, w_sh;
  // dQ in fp32, [B, Hq, m_blocks] tiles of kBwdBlockM x D, zeroed before the launch; each CTA
  // adds its part of every query block it sees with one bulk reduction. A tile is laid out in
  // the order of the m64n64 wgmma accumulators that compute it, [D / 64][8][128 threads][4]
  // (wgmma_ops.cuh gives element i's row and column), so the staging stores of a warp are 512
  // contiguous bytes; dq_from_accum maps it back. deterministic: the
  // per-(batch, head, query block) counters that order those additions by key block, zeroed.
  float* dq_accum;
  int* dq_order;
  int64_t batch, heads_kv;
  int64_t n_blocks, m_blocks;  // of the longest sequence, in kBwdBlockN keys / kBwdBlockM rows
  float scale;                 // dQ = scale dS K, dK = scale dS^T Q
};

// dK and dV written, dq_accum summed (the caller converts it into dq: dq_from_accum).
void backward(const BackwardParams& b, const BwdParams& kp);

// dq[b, l, h, :] = scale * dQ's sum at (b, h, l) in dq's dtype and strides.
void dq_from_accum(const BackwardParams& b, const BwdParams& kp);

}  // namespace tileattn::detail::sm90
