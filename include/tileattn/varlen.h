// tileattn/varlen.h: batches of sequences of different lengths, and the exact merge of partial
// attention states (split-KV, context parallelism, cascades all use it).
#pragma once

#include <cstdint>

#include "tileattn/attention.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn {

// Where the sequences of a batch live (all int32, contiguous, on q's device; null = not given).
//   cu_seqlens_q [B + 1]: prefix sums of the query lengths (cu[0] = 0): sequence b is rows
//       cu[b] .. cu[b + 1] - 1 of a packed q [total_q, Hq, D]; out is [total_q, Hq, D] and lse
//       [Hq, total_q]. Without it q, out and lse are the dense [B, Lq, Hq, D] and [B, Hq, Lq].
//   cu_seqlens_k [B + 1]: the same for k and v ([total_k, Hkv, D]; dense [B, Lk, Hkv, D]).
//   seqused_q, seqused_k [B]: only the first seqused[b] rows of sequence b count; the rest may
//       hold anything (NaN included) and are neither read into any result nor written.
//   max_seqlen_q, max_seqlen_k: the longest sequence (needed with cu_seqlens on CUDA, where
//       the host cannot read them; on the CPU -1 means "compute it").
// Causal masks and windows align bottom-right per sequence. A sequence of length 0 is legal
// and writes nothing; a row that sees no key gets O = 0 and LSE = -inf.
struct Seqlens {
  const TensorRef* cu_seqlens_q = nullptr;
  const TensorRef* cu_seqlens_k = nullptr;
  const TensorRef* seqused_q = nullptr;
  const TensorRef* seqused_k = nullptr;
  int64_t max_seqlen_q = -1, max_seqlen_k = -1;
};

// forward() for a batch described by `seqlens` (see above); the rest as forward().
void forward_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                    const TensorRef* lse, const Seqlens& seqlens, const Options& options = {});

Support supported_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                         const TensorRef* lse, const Seqlens& seqlens, const Options& options = {});

// The fp64 oracle of forward_varlen (CPU tensors): each sequence computed on its own.
void reference_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                      const TensorRef* lse, const Seqlens& seqlens, const Options& options = {});

// Merges S partial states over disjoint key sets: out_partial [S, B, L, H, D] fp32, each split's
// output normalized by its own softmax sum, and lse_partial [S, B, H, L] fp32 (natural log) give
//   lse = log(sum_s exp(lse_s)),   out = sum_s exp(lse_s - lse) * out_s
// into out [B, L, H, D] (fp32, fp16 or bf16) and lse [B, H, L] fp32 (may be null). A split whose
// lse is -inf contributes nothing, whatever its out holds; when every split's is -inf, out = 0
// and lse = -inf. Any strides; CPU or CUDA (options.cuda_stream), S <= kMaxSplits.
void combine(const TensorRef& out_partial, const TensorRef& lse_partial, const TensorRef& out,
             const TensorRef* lse, const Options& options = {});

}  // namespace tileattn
