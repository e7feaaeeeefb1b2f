// combine.h: the exact merge of split-KV partial states (DESIGN.md section 6), as a plain params
// struct and the per-row arithmetic shared by the CPU and CUDA combines.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/seqlens.h"
#include "tileattn/tensor.h"

namespace tileattn::detail {

// Partial outputs o_part [S, B', L', H, D] (fp32, each normalized by its own sum) and their LSEs
// lse_part [S, B', H, L'] merge into out [B, L, H, D] and lse [B, H, L]. Row (b, pos) of
// sequence b reads partial row (b, q_start + pos) and writes out row (b, q_start + pos), with the
// batch strides of a packed (varlen) batch 0; only pos < len_q(b) rows are merged (seqs).
struct CombineParams {
  const float* o_part = nullptr;
  int64_t o_ss = 0, o_sb = 0, o_sl = 0, o_sh = 0, o_sd = 1;
  const float* lse_part = nullptr;
  int64_t l_ss = 0, l_sb = 0, l_sh = 0, l_sl = 1;
  void* out = nullptr;
  DType out_dtype = DType::kFloat32;
  int64_t out_sb = 0, out_sl = 0, out_sh = 0, out_sd = 1;
  float* lse = nullptr;  // may be null
  int64_t lse_sb = 0, lse_sh = 0, lse_sl = 1;
  int splits = 1;
  int64_t batch = 0, heads = 0, head_dim = 0;
  Seqs seqs;  // max_q: the rows per sequence (the dense L)
  int device_index = 0;
  void* cuda_stream = nullptr;
  int num_threads = 0;
};

// The merge weights of one row: *m the largest finite partial LSE, *sum the sum of exp(lse_s -
// m); *nan when some partial LSE is NaN (which then propagates). Splits whose LSE is -inf weigh
// nothing: with every split at -inf, *m = -inf and *sum = 0.
TILEATTN_HD void merge_stats(const float* lse, int64_t stride, int splits, float* m, float* sum, bool* nan) {
  float hi = -INFINITY;
  bool bad = false;
  for (int s = 0; s < splits; ++s) {
    const float x = lse[s * stride];
    if (x != x)
      bad = true;
    else
      hi = x > hi ? x : hi;
  }
  float total = 0.0f;
  if (hi != -INFINITY)
    for (int s = 0; s < splits; ++s) {
      const float x = lse[s * stride];
      if (x != -INFINITY && x == x) total += expf(x - hi);
    }
  *m = hi;
  *sum = total;
  *nan = bad;
}

// The merged LSE of a row from merge_stats.
TILEATTN_HD float merged_lse(float m, float sum, bool nan) {
  if (nan) return NAN;
  return m == -INFINITY ? -INFINITY : m + logf(sum);
}

}  // namespace tileattn::detail
