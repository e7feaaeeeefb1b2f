// kernel_params.h: what every CUDA forward kernel reads from the host, derived once from
// AttnParams, and what a tile derives from it on the device (its sequence, mask and band).
#pragma once

#include <cfloat>
#include <cstdint>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "common/params.h"
#include "common/seqlens.h"

namespace tileattn::detail::cuda {

// The weight of a raw score s is exp2(t * post - m) with t one of these, so that the row max can
// be taken over t: post must be > 0 for max(t) * post to be the max of the logits.
enum class ScoreTransform : int {
  kNone,     // t = s,                     post = scale * log2(e)   (scale > 0)
  kNegate,   // t = -s,                    post = -scale * log2(e)  (scale < 0)
  kSoftcap,  // t = tanh(s * scale / cap), post = cap * log2(e)
};

struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // may be null
  // Element strides of [B, L, H, D] (D contiguous; a packed varlen tensor has a batch stride of
  // 0 and per-sequence row offsets, seqs) and of the [B, H, L] LSE. 64-bit throughout.
  int64_t q_sb, q_sl, q_sh, k_sb, k_sl, k_sh, v_sb, v_sl, v_sh, o_sb, o_sl, o_sh;
  int64_t lse_sb, lse_sh, lse_sl;
  int64_t seqlen_q, seqlen_k, heads_q, group;  // the longest sequence; group = query heads per kv head
  Seqs seqs;                                   // per-sequence starts and lengths (device pointers)
  int64_t window_left, window_right;           // the normalized mask (params.h), per sequence below
  int64_t m_blocks;  // query tiles per (batch, head) of the longest sequence; sm90 packed: per head group
  int64_t tiles;     // m_blocks * heads_q * batch * splits (sm90 packed: heads_q / pack)
  int pack_shift;    // sm90 GQA packing: log2 of the query heads a tile row cycles through (0: none)
  int d_chunks;      // the problem's head dim / 8 (<= the kernel's)
  // Split-KV: with splits > 1 each tile's key blocks are cut into `splits` runs and every run
  // writes its normalized fp32 output and LSE to o_part [S, B', L', Hq, D] / lse_part [S, B', Hq,
  // L'] (common/partial.h; B' = 1 for a varlen q, whose rows go at q_start + pos).
  int splits;
  float* o_part;
  float* lse_part;
  int64_t op_ss, op_sb, op_sl, op_sh, lp_ss, lp_sb, lp_sh;
  // sm90 merges the splits in the kernel: one counter per (unsplit tile, consumer), zero
  // when a launch starts; the split that arrives last merges the consumer's rows and resets it to 0.
  // Null: a combine kernel follows the launch.
  int* arrivals;
  // A KV cache (forward_kvcache): with page_table, key position pos of sequence b is slot
  // pos % page_size of page page_table[b * page_table_stride + pos / page_size], k_sb / v_sb
  // being the page strides; else batch b's keys are in cache row kv_batch_idx[b] (null: b).
  // sm90 loads a paged block as boxes of page_box rows, each within one page (launch.cuh).
  const int32_t* page_table;
  int page_size, page_box;
  int64_t page_table_stride;
  const int32_t* kv_batch_idx;
  ScoreTransform transform;
  float pre;         // kSoftcap: 2 log2(e) scale / softcap
  float post;        // the FFMA multiplier of exp2(t * post - m), > 0
  bool conditional;  // conditional rescaling (Rescale::kConditional)
  // sm90 tuning order (TileConfig::lpt_mib): the (batch, head) pairs and the pairs a section
  // (last, so the other fields keep their offsets in the kernels' parameter space).
  int64_t order_pairs, order_section;
};

// pack (sm90's GQA packing, a power of two dividing the group): query heads per tile, whose
// rows then run over (position, head) pairs; 1 = one head a tile. splits >= 1.
inline KernelParams make_kernel_params(const AttnParams& p, int block_m, int pack = 1, int splits = 1) {
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
  k.seqs = p.seqs;
  k.page_table = p.page_table;
  k.page_size = static_cast<int>(p.page_size);
  k.page_table_stride = p.page_table_stride;
  k.kv_batch_idx = p.kv_batch_idx;
  k.window_left = p.window_left;
  k.window_right = p.window_right;
  while ((1 << k.pack_shift) < pack) ++k.pack_shift;
  k.m_blocks = (p.seqlen_q * pack + block_m - 1) / block_m;
  k.splits = splits;
  k.tiles = k.m_blocks * (p.heads_q / pack) * p.batch * splits;
  k.d_chunks = static_cast<int>(p.head_dim / 8);
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

// Points k at partial-state buffers of p's layout (common/partial.h).
inline void set_partials(KernelParams& k, const AttnParams& p, float* o_part, float* lse_part) {
  const int64_t PB = p.part_batch(), PL = p.part_len(), H = p.heads_q, D = p.head_dim;
  k.o_part = o_part;
  k.lse_part = lse_part;
  k.op_sh = D, k.op_sl = H * D, k.op_sb = p.seqs.varlen_q() ? 0 : PL * H * D, k.op_ss = PB * PL * H * D;
  k.lp_sh = PL, k.lp_sb = p.seqs.varlen_q() ? 0 : H * PL, k.lp_ss = PB * H * PL;
}

}  // namespace tileattn::detail::cuda
