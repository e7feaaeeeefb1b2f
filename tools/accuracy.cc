// accuracy.cc: the fp64 oracle on chosen rows, and element-wise comparison with it.
#include "accuracy.h"

#include <algorithm>
#include <cmath>

namespace tileattn::cli {

std::vector<RowRange> spread_rows(int64_t seqlen_q, int64_t ranges, int64_t rows_per_range) {
  if (ranges * rows_per_range >= seqlen_q || ranges <= 1) return {RowRange{0, seqlen_q}};
  std::vector<RowRange> out;
  const int64_t last_start = seqlen_q - rows_per_range;
  for (int64_t r = 0; r < ranges; ++r) {
    const int64_t begin = last_start * r / (ranges - 1);
    out.push_back({begin, begin + rows_per_range});
  }
  return out;
}

Oracle run_oracle(const AttentionData& data, const Options& options, std::vector<RowRange> rows) {
  const Shape& s = data.shape();
  Oracle oracle{std::move(rows), Buffer(DType::kFloat64, s.batch * s.seqlen_q * s.heads_q * s.head_dim),
                Buffer(DType::kFloat64, s.batch * s.heads_q * s.seqlen_q)};
  const TensorRef out = oracle.out.view({s.batch, s.seqlen_q, s.heads_q, s.head_dim});
  const TensorRef lse = oracle.lse.view({s.batch, s.heads_q, s.seqlen_q});
  for (const RowRange& r : oracle.rows)
    reference_rows(data.host_q(), data.host_k(), data.host_v(), out, &lse, options, r.begin, r.end);
  return oracle;
}

Errors compare_to_oracle(const Oracle& oracle, const Shape& s, const Buffer& out, const Buffer& lse) {
  Errors e;
  for (int64_t b = 0; b < s.batch; ++b)
    for (const RowRange& r : oracle.rows)
      for (int64_t i = r.begin; i < r.end; ++i)
        for (int64_t h = 0; h < s.heads_q; ++h) {
          ++e.rows;
          const int64_t o0 = ((b * s.seqlen_q + i) * s.heads_q + h) * s.head_dim;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            const double ours = out.at(o0 + d), truth = oracle.out.at(o0 + d);
            if (std::isnan(ours) && !std::isnan(truth))
              ++e.out_nan;
            else if (!std::isnan(ours))
              e.out = std::max(e.out, std::abs(ours - truth));
          }
          const int64_t l0 = (b * s.heads_q + h) * s.seqlen_q + i;
          const double ours = lse.at(l0), truth = oracle.lse.at(l0);
          const bool ours_empty = ours == -INFINITY, truth_empty = truth == -INFINITY;
          e.empty_rows += truth_empty;
          if (std::isnan(ours) && !std::isnan(truth))
            ++e.lse_nan;
          else if (ours_empty != truth_empty)
            ++e.lse_inf_mismatch;
          else if (!truth_empty)
            e.lse = std::max(e.lse, std::abs(ours - truth));
        }
  return e;
}

}  // namespace tileattn::cli
