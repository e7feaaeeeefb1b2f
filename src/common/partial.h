// partial.h: the split-KV partial states of a forward call: their layout, and the combine that
// merges them into the call's out and LSE.
#pragma once

#include "common/combine.h"
#include "common/params.h"

namespace tileattn::detail {

// Partial states of p with `splits` splits, contiguous: O [S, B', L', Hq, D] and LSE [S, B', Hq,
// L'] (B', L' = p.part_batch(), p.part_len()).
inline int64_t partial_o_elems(const AttnParams& p, int splits) {
  return splits * p.part_batch() * p.part_len() * p.heads_q * p.head_dim;
}
inline int64_t partial_lse_elems(const AttnParams& p, int splits) {
  return splits * p.part_batch() * p.heads_q * p.part_len();
}

// The merge of p's partial states into p.out and p.lse, row by row of each sequence.
inline CombineParams partial_combine(const AttnParams& p, const float* o_part, const float* lse_part,
                                     int splits) {
  const int64_t PB = p.part_batch(), PL = p.part_len(), H = p.heads_q, D = p.head_dim;
  CombineParams c;
  c.o_part = o_part;
  c.o_sd = 1, c.o_sh = D, c.o_sl = H * D, c.o_sb = p.seqs.varlen_q() ? 0 : PL * H * D,
  c.o_ss = PB * PL * H * D;
  c.lse_part = lse_part;
  c.l_sl = 1, c.l_sh = PL, c.l_sb = p.seqs.varlen_q() ? 0 : H * PL, c.l_ss = PB * H * PL;
  c.out = p.out;
  c.out_dtype = p.out_dtype;
  c.out_sb = p.out_stride.b, c.out_sl = p.out_stride.l, c.out_sh = p.out_stride.h, c.out_sd = p.out_stride.d;
  c.lse = static_cast<float*>(p.lse);
  c.lse_sb = p.lse_stride.b, c.lse_sh = p.lse_stride.h, c.lse_sl = p.lse_stride.l;
  c.splits = splits;
  c.batch = p.batch, c.heads = H, c.head_dim = D;
  c.seqs = p.seqs;
  c.device_index = p.device_index;
  c.cuda_stream = p.cuda_stream;
  c.num_threads = p.num_threads;
  return c;
}

}  // namespace tileattn::detail
