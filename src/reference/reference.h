// reference.h: the fp64 oracle and eager (materialized) attention on the CPU.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace tileattn::detail::reference {

// fp64 attention for query rows [row_begin, row_end) of every (batch, head). out and lse may be
// of any dtype (p.out_dtype, p.lse_dtype); masked keys do not take part at all.
void oracle(const AttnParams& p, int64_t row_begin, int64_t row_end);

// Standard attention: S = scale Q K^T and P = softmax(S) materialized as [B, Hq, Lq, Lk] in the
// working dtype (the softmax itself in fp32), then O = P V. Returns the bytes S and P took.
int64_t eager(const AttnParams& p);

// The backward's fp64 oracle: O, LSE, P and the gradients materialized in double from q, k, v
// and dout (b.fwd.out and lse unused), per sequence; dq, dk, dv in b.grad_dtype.
void oracle_backward(const BackwardParams& b);

// The backward as eager autograd runs it: S, P, dP and dS rounded to the working dtype.
void eager_backward(const BackwardParams& b);

}  // namespace tileattn::detail::reference
