// tileattn/backward.h: the gradients of forward() (training), their fp64 oracle and the eager
// baseline.
#pragma once

#include "tileattn/attention.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"
#include "tileattn/varlen.h"

namespace tileattn {

// dq, dk, dv of forward(q, k, v) -> (out, lse) for the output gradient dout:
//   P = exp(S - lse)   dV = P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dO * O))
//   dQ = scale dS K    dK = scale dS^T Q          (softcap: dS times 1 - tanh^2)
// out and lse are forward()'s results for the same options (lse is required); dout and out are
// shaped like q, dq like q, dk and dv like k, all in q's dtype (fp32 accumulation). GQA: dk and
// dv sum over the query heads of their group. Memory beyond the gradients is O(B H L D) fp32,
// never O(Lq * Lk). Throws tileattn::Error on bad input before anything is written.
// options.deterministic asks for the same bits on every run (the CPU always gives them).
// dlse (optional, fp32, shaped like lse): the gradient of a loss that also uses the returned
// LSE (as merging partial results does); since d lse_i / d S_ij = P_ij it only shifts D:
// dS = P * (dP - (D - dlse)).
void backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
              const TensorRef& out, const TensorRef& lse, const TensorRef& dq, const TensorRef& dk,
              const TensorRef& dv, const Options& options = {}, const TensorRef* dlse = nullptr);

// Whether backward() takes these arguments and the kernel it would run (Kernel::kCpuTiled,
// kCudaSm80 or kCudaSm90), without running it; when it does not, `reason` names the argument, as
// backward() would throw.
Support supported_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                           const TensorRef& out, const TensorRef& lse, const TensorRef& dq,
                           const TensorRef& dk, const TensorRef& dv, const Options& options = {},
                           const TensorRef* dlse = nullptr);

// backward() of forward_varlen() (the same Seqlens); rows past seqused get no gradient written.
void backward_varlen(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                     const TensorRef& out, const TensorRef& lse, const TensorRef& dq, const TensorRef& dk,
                     const TensorRef& dv, const Seqlens& seqlens, const Options& options = {},
                     const TensorRef* dlse = nullptr);

// The fp64 oracle (CPU): the formulas above materialized in double precision from q, k, v and
// dout alone (O, LSE and P computed in fp64 too), into dq, dk, dv of any float dtype (dlse as
// in backward(), of any float dtype).
void reference_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                        const TensorRef& dq, const TensorRef& dk, const TensorRef& dv,
                        const Options& options = {}, const TensorRef* dlse = nullptr);
void reference_backward_varlen(const TensorRef& dout, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef& dq, const TensorRef& dk,
                               const TensorRef& dv, const Seqlens& seqlens, const Options& options = {},
                               const TensorRef* dlse = nullptr);

// The backward as a framework's eager autograd runs it (CPU): S, P and dS materialized as [B,
// Hq, Lq, Lk] in the working dtype, products accumulated in fp32 and rounded to it. The
// yardstick of the accuracy rule (err <= 3 err(eager) + atol).
void eager_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                    const TensorRef& dq, const TensorRef& dk, const TensorRef& dv,
                    const Options& options = {}, const TensorRef* dlse = nullptr);

}  // namespace tileattn
