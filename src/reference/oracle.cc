// oracle.cc: the truth every test compares with: attention in double precision.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/convert.h"
#include "common/mask.h"
#include "reference/reference.h"

namespace tileattn::detail::reference {

void oracle(const AttnParams& p, int64_t first_row, int64_t last_row) {
  const int64_t D = p.head_dim;
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();

  for (int64_t b = 0; b < p.batch; ++b) {
    // Sequence b on its own (DESIGN.md section 6): its rows, its keys, its mask.
    const SeqInfo seq = seq_info(p.seqs, b);
    const int64_t Lk = seq.len_k, row_begin = imax(0, first_row), row_end = imin(seq.len_q, last_row);
    if (row_begin >= row_end) continue;
    const WindowMask mask = WindowMask::make(seq.len_q, Lk, p.window_left, p.window_right);
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      // This kv head's keys and values in double, shared by its query heads.
      std::vector<double> k(Lk * D), v(Lk * D);
      for (int64_t j = 0; j < Lk; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t row = seq.k_start + j;
          k[j * D + d] =
              load_as_double(p.k, p.dtype, kv_offset(p, p.k_stride, b, row, hk) + d * p.k_stride.d);
          v[j * D + d] =
              load_as_double(p.v, p.dtype, kv_offset(p, p.v_stride, b, row, hk) + d * p.v_stride.d);
        }
      const int64_t rows = row_end - row_begin, g = p.group_size();
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads)
      for (int64_t item = 0; item < g * rows; ++item) {
        const int64_t h = hk * g + item / rows, i = row_begin + item % rows, qi = seq.q_start + i;
        std::vector<double> q(D), s(Lk), o(D, 0.0);
        for (int64_t d = 0; d < D; ++d)
          q[d] = load_as_double(p.q, p.dtype,
                                b * p.q_stride.b + qi * p.q_stride.l + h * p.q_stride.h + d * p.q_stride.d);
        const int64_t lo = mask.lo(i), hi = mask.hi(i);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
          double x = static_cast<double>(p.scale) * dot;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          s[j] = x;
          m = (std::isnan(x) || std::isnan(m)) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, x);
        }
        double l = 0.0;
        for (int64_t j = lo; j < hi; ++j) {
          const double e = std::exp(s[j] - m);
          l += e;
          for (int64_t d = 0; d < D; ++d) o[d] += e * v[j * D + d];
        }
        const bool empty = lo >= hi;
        for (int64_t d = 0; d < D; ++d)
          store_from_double(
              p.out, p.out_dtype,
              b * p.out_stride.b + qi * p.out_stride.l + h * p.out_stride.h + d * p.out_stride.d,
              empty ? 0.0 : o[d] / l);
        if (p.lse)
          store_from_double(p.lse, p.lse_dtype, b * p.lse_stride.b + h * p.lse_stride.h + qi * p.lse_stride.l,
                            empty ? -std::numeric_limits<double>::infinity() : m + std::log(l));
      }
    }
  }
}

}  // namespace tileattn::detail::reference
