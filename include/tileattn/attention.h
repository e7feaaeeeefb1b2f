// tileattn/attention.h: forward(), supported(), and the reference and eager baselines.
#pragma once

#include <cstdint>
#include <string>

#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn {

// Why a problem can or cannot run, and on what.
struct Support {
  bool ok = false;
  Kernel kernel = Kernel::kAuto;  // the kernel forward() would run when ok
  std::string reason;             // when !ok: which argument, its value, what was expected
  explicit operator bool() const { return ok; }
};

// O = softmax(scale * Q K^T [+ mask]) V, tiled with online softmax; never allocates O(Lq * Lk).
//   q   [B, Lq, Hq, D]    k, v [B, Lk, Hkv, D]    out [B, Lq, Hq, D]    lse [B, Hq, Lq] fp32
// q, k, v and out share a dtype (fp32, fp16, bf16) and a device; lse may be null.
// Rows that see no key get out = 0 and lse = -inf. Throws tileattn::Error on bad input before
// anything is written, tileattn::RuntimeError on a device failure.
void forward(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
             const TensorRef* lse, const Options& options = {});

// Whether forward() accepts these arguments, and which kernel it would run.
Support supported(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                  const TensorRef* lse, const Options& options = {});

// The fp64 oracle (CPU tensors only): S and P materialized per row in double precision.
// Inputs of any dtype; out and lse of any dtype (fp64 keeps every digit).
void reference(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
               const TensorRef* lse, const Options& options = {});

// Only rows [row_begin, row_end) of every (batch, head): lets a caller check a sample of rows of
// a long problem. Rows outside the range are not written.
void reference_rows(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                    const TensorRef* lse, const Options& options, int64_t row_begin, int64_t row_end);

struct EagerStats {
  int64_t extra_bytes = 0;  // peak memory eager allocated beyond its inputs and outputs (S and P)
};

// Standard attention as frameworks run it eagerly: S = scale Q K^T and P = softmax(S) are
// materialized as [B, Hq, Lq, Lk] tensors in the working dtype (softmax computed in fp32), then
// O = P V. The speed, memory and error baseline.
void eager(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
           const TensorRef* lse, const Options& options = {}, EagerStats* stats = nullptr);

}  // namespace tileattn
