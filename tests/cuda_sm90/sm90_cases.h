// sm90_cases.h: the problems the sm90 kernel is checked on against the oracle: lengths on and
// off the tile grid, Lq != Lk, each mask form, softcap, GQA/MQA (packed and not), both dtypes,
// strided views, and more query tiles than SMs.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_case.h"

namespace tileattn::cuda_test {

inline Problem make_problem(int64_t lq, int64_t lk, int64_t d, DType dtype, int64_t hq, int64_t hkv) {
  Problem p;
  p.seqlen_q = lq;
  p.seqlen_k = lk;
  p.head_dim = d;
  p.dtype = dtype;
  p.heads_q = hq;
  p.heads_kv = hkv;
  return p;
}

// gtest's name for a case of the sweep: the problem and its index.
inline std::string name_of(const ::testing::TestParamInfo<Problem>& info) {
  return info.param.test_name() + "_" + std::to_string(info.index);
}

inline std::vector<Problem> sm90_cases() {
  std::vector<Problem> out;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1}, {17, 203}, {128, 128}, {113, 1025}, {1023, 1025}, {1025, 63}, {256, 4096}, {2048, 2048}};
  for (int64_t d : {64, 128, 256})
    for (DType dtype : {DType::kBFloat16, DType::kFloat16})
      for (auto [lq, lk] : lengths)
        for (int mask = 0; mask < 4; ++mask) {
          Problem p = make_problem(lq, lk, d, dtype, 4, mask == 3 ? 1 : 2);  // GQA 2, MQA with softcap
          if (mask == 1) p.options.causal = true;
          if (mask == 2) p.options.window_left = 100, p.options.window_right = 30;
          if (mask == 3) p.options.softcap = 30.0f;
          out.push_back(p);
        }
  // More query tiles than an H100/H200 has SMs (132): persistent CTAs take several each.
  Problem many = make_problem(1030, 777, 128, DType::kBFloat16, 8, 2);
  many.batch = 2;
  many.options.causal = true;
  out.push_back(many);
  Problem many64 = make_problem(800, 900, 64, DType::kFloat16, 16, 4);
  many64.batch = 2;
  many64.options.window_left = 300, many64.options.window_right = 0;
  out.push_back(many64);
  out.push_back(make_problem(1100, 1100, 256, DType::kBFloat16, 16, 16));
  // Several tiles for every SM, with whole tiles of empty rows (causal, Lq > Lk) among them.
  Problem crowded = make_problem(600, 250, 128, DType::kBFloat16, 4, 2);  // 320 tiles
  crowded.batch = 16;
  crowded.options.causal = true;
  out.push_back(crowded);
  Problem crowded64 = make_problem(700, 300, 64, DType::kFloat16, 8, 8);  // 256 tiles
  crowded64.batch = 8;
  crowded64.options.causal = true;
  out.push_back(crowded64);
  // GQA packing (tile_config.h, pack_factor): several query heads of one KV head in a tile, for
  // short rows; each mask form, a group that divides 64 (packed) and one that does not (3),
  // 64 heads to one (a consumer's 64 rows are one position), batches, permuted views.
  const struct {
    int64_t lq, lk, d, hq, hkv, batch;
    int mask;
  } packed[] = {{1, 1025, 128, 32, 4, 2, 0}, {1, 300, 128, 16, 2, 1, 1}, {5, 300, 64, 16, 1, 3, 2},
                {40, 1000, 256, 8, 2, 1, 1}, {17, 203, 128, 6, 2, 2, 0}, {60, 777, 64, 64, 1, 1, 1},
                {3, 64, 256, 4, 1, 1, 3},    {33, 129, 64, 8, 4, 2, 2}};
  for (const auto& c : packed) {
    Problem p = make_problem(c.lq, c.lk, c.d, c.d == 64 ? DType::kFloat16 : DType::kBFloat16, c.hq, c.hkv);
    p.batch = c.batch;
    if (c.mask == 1) p.options.causal = true;
    if (c.mask == 2) p.options.window_left = 50, p.options.window_right = 7;
    if (c.mask == 3) p.options.softcap = 20.0f;
    out.push_back(p);
  }
  Problem packed_view = make_problem(3, 500, 128, DType::kBFloat16, 8, 2);
  packed_view.q_layout = packed_view.kv_layout = packed_view.out_layout = Layout::kBHLD;
  packed_view.options.causal = true;
  out.push_back(packed_view);
  Problem strided = make_problem(300, 500, 128, DType::kBFloat16, 4, 2);
  strided.q_layout = strided.kv_layout = strided.out_layout = Layout::kBHLD;
  out.push_back(strided);
  Problem padded = make_problem(257, 129, 64, DType::kFloat16, 2, 2);
  padded.q_layout = padded.kv_layout = padded.out_layout = Layout::kAligned;
  padded.options.causal = true;
  out.push_back(padded);
  return out;
}

}  // namespace tileattn::cuda_test
