// sink.h: where a CPU work item's finished rows go: the problem's out and LSE, or with split-KV
// one split's fp32 partial state (common/partial.h's layout).
#pragma once

#include <algorithm>

#include "common/online_softmax.h"
#include "common/params.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {

struct Sink {
  float* o_part = nullptr;  // null: p.out and p.lse
  float* lse_part = nullptr;
  int64_t o_sb = 0, o_sl = 0, o_sh = 0, l_sb = 0, l_sh = 0;  // strides of one split's slice
};

// Row `row` (of q, out and the LSE) of batch entry b, head h, from its softmax state and O
// accumulator (D floats): O / l (exactly 0 for a row that saw no key, whatever V held) and its
// LSE, or the split's partial state.
inline void store_row(const AttnParams& p, const SimdKernels& simd, const Sink& sink, int64_t b, int64_t h,
                      int64_t row, const SoftmaxRow& state, float* o_row) {
  const int64_t D = p.head_dim;
  if (state.l == 0.0f) std::fill_n(o_row, D, 0.0f);
  if (sink.o_part) {
    const int64_t pb = p.seqs.varlen_q() ? 0 : b;
    simd.store(o_row, state.inv_l(), sink.o_part + pb * sink.o_sb + row * sink.o_sl + h * sink.o_sh,
               DType::kFloat32, 1, D);
    sink.lse_part[pb * sink.l_sb + h * sink.l_sh + row] = state.lse();
    return;
  }
  const int64_t off = b * p.out_stride.b + row * p.out_stride.l + h * p.out_stride.h;
  simd.store(o_row, state.inv_l(), const_cast<char*>(element_ptr(p.out, p.out_dtype, off)), p.out_dtype,
             p.out_stride.d, D);
  if (p.lse)
    static_cast<float*>(p.lse)[b * p.lse_stride.b + h * p.lse_stride.h + row * p.lse_stride.l] = state.lse();
}

}  // namespace tileattn::detail::cpu
