// shape.h: an attention problem's sizes and the FLOP count the tool reports against.
#pragma once

#include <cstdint>

namespace tileattn::cli {

struct Shape {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t seqlen_q = 1;
  int64_t seqlen_k = 1;
  int64_t head_dim = 64;
};

// 4 * B * Hq * Lq * Lk * D: two GEMMs (Q K^T and P V) of 2 FLOPs per multiply-add. Halved when
// causal, the convention FlashAttention's benchmarks use (it ignores the diagonal blocks).
inline double attention_flops(const Shape& s, bool causal) {
  const double flops = 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads_q) *
                       static_cast<double>(s.seqlen_q) * static_cast<double>(s.seqlen_k) *
                       static_cast<double>(s.head_dim);
  return causal ? flops / 2 : flops;
}

}  // namespace tileattn::cli
