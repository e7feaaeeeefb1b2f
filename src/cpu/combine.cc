// combine.cc: the split-KV merge on the CPU: one (sequence, row, head) at a time.
#include "cpu/combine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/params.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {

void combine(const CombineParams& c) {
  const SimdKernels& simd = detail::simd();
  const int threads = c.num_threads > 0 ? c.num_threads : omp_get_max_threads();
  const int64_t rows = c.batch * c.seqs.max_q, D = c.head_dim;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> acc(D);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < rows * c.heads; ++item) {
      const int64_t h = item % c.heads, row = item / c.heads;
      const int64_t b = row / c.seqs.max_q, pos = row % c.seqs.max_q;
      const SeqInfo seq = seq_info(c.seqs, b);
      if (pos >= seq.len_q) continue;
      const int64_t r = seq.q_start + pos;
      const float* lse = c.lse_part + b * c.l_sb + h * c.l_sh + r * c.l_sl;
      const float* o = c.o_part + b * c.o_sb + r * c.o_sl + h * c.o_sh;
      float m, sum;
      bool nan;
      merge_stats(lse, c.l_ss, c.splits, &m, &sum, &nan);
      std::fill(acc.begin(), acc.end(), nan ? NAN : 0.0f);
      if (!nan && m != -INFINITY) {
        for (int s = 0; s < c.splits; ++s) {
          const float x = lse[s * c.l_ss];
          if (x == -INFINITY) continue;  // an empty split: its output is never read
          const float w = expf(x - m) / sum;
          for (int64_t d = 0; d < D; ++d) acc[d] += w * o[s * c.o_ss + d * c.o_sd];
        }
      }
      const int64_t out_off = b * c.out_sb + r * c.out_sl + h * c.out_sh;
      simd.store(acc.data(), 1.0f, const_cast<char*>(element_ptr(c.out, c.out_dtype, out_off)), c.out_dtype,
                 c.out_sd, D);
      if (c.lse) c.lse[b * c.lse_sb + h * c.lse_sh + r * c.lse_sl] = merged_lse(m, sum, nan);
    }
  }
}

}  // namespace tileattn::detail::cpu
