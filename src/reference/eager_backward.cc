// eager_backward.cc: the backward a framework's eager autograd runs in the working dtype: the
// forward's S and P materialized (rounded to the dtype, softmax in fp32), then dV = P^T dO,
// dP = dO V^T, dS = P (dP - rowsum(P dP)) and the two products for dQ and dK, each result
// rounded to the dtype and every sum accumulated in fp32. The accuracy rule's yardstick.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/convert.h"
#include "common/mask.h"
#include "reference/reference.h"
#include "simd/simd.h"

namespace tileattn::detail::reference {
namespace {

// x rounded to the working dtype (fp32 stays fp32).
float round_to(DType dtype, float x) {
  if (dtype == DType::kBFloat16) return bf16_to_float(float_to_bf16(x));
  if (dtype == DType::kFloat16) return fp16_to_float(float_to_fp16(x));
  return x;
}

// Rows of one (batch, head) of a [B, L, H, D] tensor as fp32, [L][D] (the SIMD kernels' exact
// conversion).
void load_rows(const void* base, DType dtype, const Strides4& st, int64_t b, int64_t h, int64_t L, int64_t D,
               float* dst) {
  for (int64_t l = 0; l < L; ++l)
    simd().load(element_ptr(base, dtype, b * st.b + l * st.l + h * st.h), dtype, st.d, dst + l * D, D, 1.0f);
}

}  // namespace

// Per (batch, KV head), in turn: its K and V as fp32 once; per query head of the group the
// rows' forward and backward (rows split over threads), then dK and dV (keys split over
// threads). Every sum runs in the same order as the formulas: over d for S and dP, over keys
// for dQ, over queries for dK and dV, and over the group's heads for dK and dV.
void eager_backward(const BackwardParams& bp) {
  const AttnParams& p = bp.fwd;
  const int64_t D = p.head_dim, Lq = p.seqlen_q, Lk = p.seqlen_k, g = p.group_size();
  const DType dt = p.dtype;
  const float scale = p.scale, cap = p.softcap;
  const WindowMask mask = p.window_mask();
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
  std::vector<float> q(Lq * D), dout(Lq * D), k(Lk * D), v(Lk * D), dk(Lk * D), dv(Lk * D);
  std::vector<float> s(Lq * Lk), prob(Lq * Lk), ds(Lq * Lk);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      load_rows(p.k, dt, p.k_stride, b, hk, Lk, D, k.data());
      load_rows(p.v, dt, p.v_stride, b, hk, Lk, D, v.data());
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int64_t h = hk * g; h < (hk + 1) * g; ++h) {
        load_rows(p.q, dt, p.q_stride, b, h, Lq, D, q.data());
        load_rows(bp.dout, p.out_dtype, bp.dout_stride, b, h, Lq, D, dout.data());
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
        for (int64_t i = 0; i < Lq; ++i) {
          float* si = s.data() + i * Lk;
          float* pi = prob.data() + i * Lk;
          float* dsi = ds.data() + i * Lk;
          const float* qi = q.data() + i * D;
          const float* doi = dout.data() + i * D;
          // Forward: S (capped), P = softmax(S) in fp32 rounded to the dtype.
          float m = -INFINITY;
          for (int64_t j = 0; j < Lk; ++j) {
            float dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qi[d] * k[j * D + d];
            float x = round_to(dt, dot * scale);
            if (cap > 0) x = round_to(dt, cap * std::tanh(x / cap));
            if (j < mask.lo(i) || j >= mask.hi(i)) x = -INFINITY;
            si[j] = x;
            m = std::max(m, x);
          }
          float l = 0;
          for (int64_t j = 0; j < Lk; ++j) l += si[j] == -INFINITY ? 0.0f : std::exp(si[j] - m);
          for (int64_t j = 0; j < Lk; ++j)
            pi[j] = si[j] == -INFINITY ? 0.0f : round_to(dt, std::exp(si[j] - m) / l);
          // Backward: dP = dO V^T (rounded), the softmax's backward, the capped scores' derivative.
          float sum = 0;
          for (int64_t j = 0; j < Lk; ++j) {
            float dp = 0;
            for (int64_t d = 0; d < D; ++d) dp += doi[d] * v[j * D + d];
            dsi[j] = round_to(dt, dp);
            sum += dsi[j] * pi[j];
          }
          if (bp.dlse)  // autograd through the LSE adds dlse * P to dS
            sum -= static_cast<float>(load_as_double(
                bp.dlse, bp.dlse_dtype, b * bp.dlse_stride.b + h * bp.dlse_stride.h + i * bp.dlse_stride.l));
          for (int64_t j = 0; j < Lk; ++j) {
            float x = round_to(dt, pi[j] * (dsi[j] - sum));
            if (cap > 0 && si[j] != -INFINITY) {
              const float t = si[j] / cap;
              x = round_to(dt, x * (1.0f - t * t));
            }
            dsi[j] = x;
          }
          std::vector<float> acc(D, 0.0f);  // dQ's row, summed over keys in order
          for (int64_t j = 0; j < Lk; ++j)
            for (int64_t d = 0; d < D; ++d) acc[d] += dsi[j] * k[j * D + d];
          for (int64_t d = 0; d < D; ++d)
            store_from_double(
                bp.dq, bp.grad_dtype,
                b * bp.dq_stride.b + i * bp.dq_stride.l + h * bp.dq_stride.h + d * bp.dq_stride.d,
                round_to(dt, acc[d] * scale));
        }
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
        for (int64_t j = 0; j < Lk; ++j) {
          std::vector<float> a(D, 0.0f), c(D, 0.0f);  // dK's and dV's rows, summed over queries in order
          for (int64_t i = 0; i < Lq; ++i) {
            const float dsij = ds[i * Lk + j], pij = prob[i * Lk + j];
            for (int64_t d = 0; d < D; ++d) {
              a[d] += dsij * q[i * D + d];
              c[d] += pij * dout[i * D + d];
            }
          }
          for (int64_t d = 0; d < D; ++d) {
            dk[j * D + d] += round_to(dt, a[d] * scale);
            dv[j * D + d] += round_to(dt, c[d]);
          }
        }
      }
      for (int64_t j = 0; j < Lk; ++j)
        for (int64_t d = 0; d < D; ++d) {
          store_from_double(
              bp.dk, bp.grad_dtype,
              b * bp.dk_stride.b + j * bp.dk_stride.l + hk * bp.dk_stride.h + d * bp.dk_stride.d,
              round_to(dt, dk[j * D + d]));
          store_from_double(
              bp.dv, bp.grad_dtype,
              b * bp.dv_stride.b + j * bp.dv_stride.l + hk * bp.dv_stride.h + d * bp.dv_stride.d,
              round_to(dt, dv[j * D + d]));
        }
    }
}

}  // namespace tileattn::detail::reference
