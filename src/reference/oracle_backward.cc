// oracle_backward.cc: the truth of every backward test: DESIGN.md section 7's formulas written
// out in double precision, the forward's O and LSE recomputed in double too.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/convert.h"
#include "common/mask.h"
#include "reference/reference.h"

namespace tileattn::detail::reference {
namespace {

// Row `row` of a [B, L, H, D] tensor (batch stride 0 and per-sequence rows for packed ones) as
// doubles.
void load_row(const void* base, DType dtype, const Strides4& st, int64_t b, int64_t row, int64_t h, int64_t D,
              double* dst) {
  for (int64_t d = 0; d < D; ++d)
    dst[d] = load_as_double(base, dtype, b * st.b + row * st.l + h * st.h + d * st.d);
}

void store_row(void* base, DType dtype, const Strides4& st, int64_t b, int64_t row, int64_t h, int64_t D,
               const double* src, double mul) {
  for (int64_t d = 0; d < D; ++d)
    store_from_double(base, dtype, b * st.b + row * st.l + h * st.h + d * st.d, src[d] * mul);
}

}  // namespace

void oracle_backward(const BackwardParams& bp) {
  const AttnParams& p = bp.fwd;
  const int64_t D = p.head_dim, g = p.group_size();
  const double scale = p.scale, cap = p.softcap, nan = std::numeric_limits<double>::quiet_NaN();
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t item = 0; item < p.batch * p.heads_kv; ++item) {
    const int64_t b = item / p.heads_kv, hk = item % p.heads_kv;
    const SeqInfo seq = seq_info(p.seqs, b);
    const int64_t Lq = seq.len_q, Lk = seq.len_k;
    const WindowMask mask = WindowMask::make(Lq, Lk, p.window_left, p.window_right);
    std::vector<double> k(Lk * D), v(Lk * D), dk(Lk * D, 0.0), dv(Lk * D, 0.0);
    for (int64_t j = 0; j < Lk; ++j) {
      load_row(p.k, p.dtype, p.k_stride, b, seq.k_start + j, hk, D, &k[j * D]);
      load_row(p.v, p.dtype, p.v_stride, b, seq.k_start + j, hk, D, &v[j * D]);
    }
    std::vector<double> q(D), dout(D), o(D), dq(D), s(Lk), th(Lk), prob(Lk);
    for (int64_t h = hk * g; h < (hk + 1) * g; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t row = seq.q_start + i;
        load_row(p.q, p.dtype, p.q_stride, b, row, h, D, q.data());
        load_row(bp.dout, p.out_dtype, bp.dout_stride, b, row, h, D, dout.data());
        const int64_t lo = mask.lo(i), hi = mask.hi(i);
        // Scores, the row's LSE, P, O.
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
          double x = scale * dot;
          if (cap > 0) th[j] = std::tanh(x / cap), x = cap * th[j];
          s[j] = x;
          m = (std::isnan(x) || std::isnan(m)) ? nan : std::max(m, x);
        }
        double l = 0;
        for (int64_t j = lo; j < hi; ++j) l += std::exp(s[j] - m);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          prob[j] = std::exp(s[j] - m) / l;
          for (int64_t d = 0; d < D; ++d) o[d] += prob[j] * v[j * D + d];
        }
        // dV = P^T dO, dP = dO V^T, dS = P (dP - D_i), dQ = scale dS K, dK = scale dS^T Q.
        double di = 0;
        for (int64_t d = 0; d < D; ++d) di += dout[d] * o[d];
        if (bp.dlse)
          di -= load_as_double(bp.dlse, bp.dlse_dtype,
                               b * bp.dlse_stride.b + h * bp.dlse_stride.h + row * bp.dlse_stride.l);
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) dp += dout[d] * v[j * D + d];
          double ds = prob[j] * (dp - di);
          if (cap > 0) ds *= 1.0 - th[j] * th[j];
          for (int64_t d = 0; d < D; ++d) {
            dv[j * D + d] += prob[j] * dout[d];
            dq[d] += ds * k[j * D + d];
            dk[j * D + d] += ds * q[d];
          }
        }
        store_row(bp.dq, bp.grad_dtype, bp.dq_stride, b, row, h, D, dq.data(), scale);
      }
    for (int64_t j = 0; j < Lk; ++j) {
      store_row(bp.dk, bp.grad_dtype, bp.dk_stride, b, seq.k_start + j, hk, D, &dk[j * D], scale);
      store_row(bp.dv, bp.grad_dtype, bp.dv_stride, b, seq.k_start + j, hk, D, &dv[j * D], 1.0);
    }
  }
}

}  // namespace tileattn::detail::reference
