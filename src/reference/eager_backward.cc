// eager_backward.cc: the backward a framework's eager autograd runs in the working dtype: the
// forward's S and P materialized (rounded to the dtype, softmax in fp32), then dV = P^T dO,
// dP = dO V^T, dS = P (dP - rowsum(P dP)) and the two products for dQ and dK, each result
// rounded to the dtype and every sum accumulated in fp32. The accuracy rule's yardstick.
#include <omp.h>

#include <cmath>
#include <vector>

#include "common/convert.h"
#include "common/mask.h"
#include "reference/reference.h"

namespace tileattn::detail::reference {
namespace {

// x rounded to the working dtype (fp32 stays fp32).
float round_to(DType dtype, float x) {
  if (dtype == DType::kBFloat16) return bf16_to_float(float_to_bf16(x));
  if (dtype == DType::kFloat16) return fp16_to_float(float_to_fp16(x));
  return x;
}

}  // namespace

void eager_backward(const BackwardParams& bp) {
  const AttnParams& p = bp.fwd;
  const int64_t D = p.head_dim, Lq = p.seqlen_q, Lk = p.seqlen_k, g = p.group_size();
  const DType dt = p.dtype;
  const float scale = p.scale, cap = p.softcap;
  const WindowMask mask = p.window_mask();
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
  auto at = [&](const void* base, const Strides4& st, int64_t b, int64_t l, int64_t h, int64_t d) {
    return static_cast<float>(load_as_double(base, dt, b * st.b + l * st.l + h * st.h + d * st.d));
  };
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t item = 0; item < p.batch * p.heads_kv; ++item) {
    const int64_t b = item / p.heads_kv, hk = item % p.heads_kv;
    std::vector<float> dk(Lk * D, 0.0f), dv(Lk * D, 0.0f);
    std::vector<float> s(Lq * Lk), prob(Lq * Lk), ds(Lq * Lk);
    for (int64_t h = hk * g; h < (hk + 1) * g; ++h) {
      // Forward: S (capped), P = softmax(S) in fp32 rounded to the dtype.
      for (int64_t i = 0; i < Lq; ++i) {
        float m = -INFINITY;
        for (int64_t j = 0; j < Lk; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += at(p.q, p.q_stride, b, i, h, d) * at(p.k, p.k_stride, b, j, hk, d);
          float x = round_to(dt, dot * scale);
          if (cap > 0) x = round_to(dt, cap * std::tanh(x / cap));
          if (j < mask.lo(i) || j >= mask.hi(i)) x = -INFINITY;
          s[i * Lk + j] = x;
          m = std::max(m, x);
        }
        float l = 0;
        for (int64_t j = 0; j < Lk; ++j) l += s[i * Lk + j] == -INFINITY ? 0.0f : std::exp(s[i * Lk + j] - m);
        for (int64_t j = 0; j < Lk; ++j)
          prob[i * Lk + j] =
              s[i * Lk + j] == -INFINITY ? 0.0f : round_to(dt, std::exp(s[i * Lk + j] - m) / l);
      }
      // Backward: dP = dO V^T (rounded), the softmax's backward, the capped scores' derivative.
      for (int64_t i = 0; i < Lq; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          float dp = 0;
          for (int64_t d = 0; d < D; ++d)
            dp += at(bp.dout, bp.dout_stride, b, i, h, d) * at(p.v, p.v_stride, b, j, hk, d);
          ds[i * Lk + j] = round_to(dt, dp);
          sum += ds[i * Lk + j] * prob[i * Lk + j];
        }
        if (bp.dlse)  // autograd through the LSE adds dlse * P to dS
          sum -= static_cast<float>(load_as_double(
              bp.dlse, bp.dlse_dtype, b * bp.dlse_stride.b + h * bp.dlse_stride.h + i * bp.dlse_stride.l));
        for (int64_t j = 0; j < Lk; ++j) {
          float x = round_to(dt, prob[i * Lk + j] * (ds[i * Lk + j] - sum));
          if (cap > 0 && s[i * Lk + j] != -INFINITY) {
            const float t = s[i * Lk + j] / cap;
            x = round_to(dt, x * (1.0f - t * t));
          }
          ds[i * Lk + j] = x;
        }
      }
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0;
          for (int64_t j = 0; j < Lk; ++j) acc += ds[i * Lk + j] * at(p.k, p.k_stride, b, j, hk, d);
          store_from_double(bp.dq, bp.grad_dtype,
                            b * bp.dq_stride.b + i * bp.dq_stride.l + h * bp.dq_stride.h + d * bp.dq_stride.d,
                            round_to(dt, acc * scale));
        }
      for (int64_t j = 0; j < Lk; ++j)
        for (int64_t d = 0; d < D; ++d) {
          float a = 0, c = 0;
          for (int64_t i = 0; i < Lq; ++i) {
            a += ds[i * Lk + j] * at(p.q, p.q_stride, b, i, h, d);
            c += prob[i * Lk + j] * at(bp.dout, bp.dout_stride, b, i, h, d);
          }
          dk[j * D + d] += round_to(dt, a * scale);
          dv[j * D + d] += round_to(dt, c);
        }
    }
    for (int64_t j = 0; j < Lk; ++j)
      for (int64_t d = 0; d < D; ++d) {
        store_from_double(bp.dk, bp.grad_dtype,
                          b * bp.dk_stride.b + j * bp.dk_stride.l + hk * bp.dk_stride.h + d * bp.dk_stride.d,
                          round_to(dt, dk[j * D + d]));
        store_from_double(bp.dv, bp.grad_dtype,
                          b * bp.dv_stride.b + j * bp.dv_stride.l + hk * bp.dv_stride.h + d * bp.dv_stride.d,
                          round_to(dt, dv[j * D + d]));
      }
  }
}

}  // namespace tileattn::detail::reference
