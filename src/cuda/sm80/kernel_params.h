// kernel_params.h: what the sm80 kernel reads from the host, derived once from AttnParams.
#pragma once

#include <cfloat>
#include <cstdint>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "common/params.h"
#include "cuda/sm80/scores.h"

namespace tileattn::detail::sm80 {

struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // may be null
  // Element strides of [B, L, H, D] (D contiguous) and of the [B, H, L] LSE. 64-bit throughout.
  int64_t q_sb, q_sl, q_sh, k_sb, k_sl, k_sh, v_sb, v_sl, v_sh, o_sb, o_sl, o_sh;
  int64_t lse_sb, lse_sh, lse_sl;
  int64_t seqlen_q, seqlen_k, heads_q, group;  // group = query heads per kv head
  int64_t m_blocks;  // query tiles per (batch, head); sm90 packed: per (batch, head group)
  int64_t tiles;     // query tiles in all: m_blocks * heads_q * batch (sm90 packed: heads_q / pack)
  int pack_shift;  // sm90 GQA packing: log2 of the query heads a tile row cycles through (0: none)
  int d_chunks;                                // the problem's head dim / 8 (<= the kernel's)
  int band_lo, band_hi;  // the mask as a band (mask.h), clamped to [-seqlen_q, seqlen_k]
  ScoreTransform transform;
  float pre;         // kSoftcap: 2 log2(e) scale / softcap
  float post;        // the FFMA multiplier of exp2(t * post - m), > 0 (see scores.h)
  bool conditional;  // conditional rescaling (Rescale::kConditional)
};

// pack (sm90's GQA packing, a power of two dividing the group): query heads per tile, whose
// rows then run over (position, head) pairs; 1 = one head a tile.
inline KernelParams make_kernel_params(const AttnParams& p, int block_m, Band band, int pack = 1) {
  KernelParams k{};
  k.q = p.q;
  k.k = p.k;
  k.v = p.v;
  k.out = p.out;
  k.lse = static_cast<float*>(p.lse);
  k.q_sb = p.q_stride.b, k.q_sl = p.q_stride.l, k.q_sh = p.q_stride.h;
  k.k_sb = p.k_stride.b, k.k_sl = p.k_stride.l, k.k_sh = p.k_stride.h;
  k.v_sb = p.v_stride.b, k.v_sl = p.v_stride.l, k.v_sh = p.v_stride.h;
  k.o_sb = p.out_stride.b, k.o_sl = p.out_stride.l, k.o_sh = p.out_stride.h;
  k.lse_sb = p.lse_stride.b, k.lse_sh = p.lse_stride.h, k.lse_sl = p.lse_stride.l;
  k.seqlen_q = p.seqlen_q;
  k.seqlen_k = p.seqlen_k;
  k.heads_q = p.heads_q;
  k.group = p.group_size();
  while ((1 << k.pack_shift) < pack) ++k.pack_shift;
  k.m_blocks = (p.seqlen_q * pack + block_m - 1) / block_m;
  k.tiles = k.m_blocks * (p.heads_q / pack) * p.batch;
  k.d_chunks = static_cast<int>(p.head_dim / 8);
  // Clamping keeps the band's meaning for rows in [0, Lq) and keys in [0, Lk): a lower edge at or
  // below -Lq never binds and one at or above Lk hides everything, and so for the upper edge.
  // It also keeps row - key + edge inside int (seqlens < 2^30).
  k.band_lo = static_cast<int>(imax(-p.seqlen_q, imin(p.seqlen_k, band.lo_diag)));
  k.band_hi = static_cast<int>(imax(-p.seqlen_q, imin(p.seqlen_k, band.hi_diag)));
  if (p.softcap > 0.0f) {
    k.transform = ScoreTransform::kSoftcap;
    k.pre = 2.0f * kLog2e * p.scale / p.softcap;
    k.post = p.softcap * kLog2e;
  } else if (p.scale < 0.0f) {
    k.transform = ScoreTransform::kNegate;
    k.post = -p.scale * kLog2e;
  } else {
    k.transform = ScoreTransform::kNone;
    // scale = 0 makes every visible key weigh the same; FLT_MIN keeps that (t * FLT_MIN is 0 or
    // tiny) while masked -inf entries stay -inf instead of -inf * 0 = NaN.
    k.post = p.scale * kLog2e > FLT_MIN ? p.scale * kLog2e : FLT_MIN;
  }
  k.conditional = p.rescale == Rescale::kConditional;
  return k;
}

}  // namespace tileattn::detail::sm80
