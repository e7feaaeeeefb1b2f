// cpu_decode.h: the CPU forward for decoding-sized problems (at most kFewRows query rows).
#pragma once

#include <vector>

#include "common/aligned.h"
#include "common/online_softmax.h"
#include "common/params.h"
#include "cpu/sink.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {

inline constexpr int64_t kFewRows = 4;
// Keys per step: the step's K and V of every KV head of an item (up to 32 heads x 16 keys x
// D = 128 in fp32: 512 KiB) stay in L2 between the copy and the math.
inline constexpr int64_t kDecodeBlock = 16;

// Per-thread scratch for items of up to `heads` KV heads and `rows` query rows: their
// pre-scaled Q and O, a step's K and V for every KV head (the copying path), a step's scores.
struct DecodeWorkspace {
  AlignedVector<float> q, o, k, v, s;
  std::vector<SoftmaxRow> state;
  DecodeWorkspace(int64_t heads, int64_t rows, int64_t d, int64_t dp)
      : q(rows * d),
        o(rows * dp),
        k(heads * kDecodeBlock * d),
        v(heads * kDecodeBlock * dp, 0.0f),
        s(rows * kDecodeBlock),
        state(rows) {}
};

// KV heads [hk0, hk1) of batch entry b, split `split` of `splits`: every query row of their
// query heads. The item walks its keys once, kDecodeBlock at a time, in address order: in
// [B, L, H, D] the heads of a position are adjacent, so reading position by position across the
// run's heads streams memory (one head alone would read a row per page, a stride the hardware
// prefetchers do not follow, at half the bandwidth). fp32 and bf16 K and V are read where they
// lie (SimdKernels::dots_heads / axpy_heads) for blocks every row sees whole; other dtypes and
// layouts, and partly masked blocks, copy the step's K and V position by position and run per
// row over the keys it sees. Scores are per-key dot products (no padded query columns), the
// softmax runs along the keys. Each row's result depends on nothing but its own keys: any item
// split gives the same bits.
void decode_item(const AttnParams& p, const SimdKernels& simd, int64_t b, int64_t hk0, int64_t hk1, int split,
                 int splits, const Sink& sink, DecodeWorkspace& ws);

}  // namespace tileattn::detail::cpu
