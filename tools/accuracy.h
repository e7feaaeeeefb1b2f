// accuracy.h: errors against the fp64 oracle, over all query rows or a spread-out sample of them.
#pragma once

#include <cstdint>
#include <vector>

#include "buffer.h"
#include "problem.h"

namespace tileattn::cli {

struct RowRange {
  int64_t begin = 0, end = 0;  // query rows [begin, end) of every (batch, head)
};

// `ranges` runs of `rows_per_range` rows spread evenly over [0, seqlen_q), the first starting at
// row 0 and the last ending at the last row, so both edge tiles are sampled; all rows when the
// sample would cover them.
std::vector<RowRange> spread_rows(int64_t seqlen_q, int64_t ranges, int64_t rows_per_range);

// The oracle's O and LSE in fp64 for the given rows (other rows are left unwritten).
struct Oracle {
  std::vector<RowRange> rows;
  Buffer out;  // [B, Lq, Hq, D] fp64
  Buffer lse;  // [B, Hq, Lq] fp64
};
Oracle run_oracle(const AttentionData& data, const Options& options, std::vector<RowRange> rows);

struct Errors {
  double out = 0;                // max |O - oracle| over the finite comparisons
  double lse = 0;                // max |LSE - oracle| where the oracle's LSE is finite
  int64_t out_nan = 0;           // O elements that are NaN where the oracle is not (unwritten)
  int64_t lse_nan = 0;           // likewise for LSE
  int64_t lse_inf_mismatch = 0;  // rows where exactly one of ours and the oracle's LSE is -inf
  int64_t empty_rows = 0;        // rows the oracle says see no key (LSE = -inf)
  int64_t rows = 0;              // (batch, head, row) triples compared
};

// Compares O and LSE (host copies, any dtype for O, fp32 LSE) with the oracle on its rows.
Errors compare_to_oracle(const Oracle& oracle, const Shape& shape, const Buffer& out, const Buffer& lse);

}  // namespace tileattn::cli
