// tensor_map.h: host-side creation of TMA tensor maps, without linking libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/params.h"

namespace tileattn::detail::sm90 {

// A tiled tensor map over `rank` dims, innermost first: dims[i] elements, byte strides for dims
// 1.. (multiples of 16), a box of box[i] elements, 16-bit elements (bf16 or fp16), 128-byte
// swizzle when box[0] * 2 == 128. Out-of-bounds elements load as zero. Throws RuntimeError
// with the driver's code when the driver rejects the map.
CUtensorMap make_tensor_map_16bit(const void* base, bool bf16, int rank, const uint64_t* dims,
                                  const uint64_t* byte_strides, const uint32_t* box, bool swizzle_128b);

// A 4-D map over a [B, L, H, D] tensor (D contiguous), innermost first: box = 64 head-dim
// elements (one 128-byte swizzle row) x 1 head x `rows` positions x 1 batch (the forward's K
// and V, the backward's four inputs).
inline CUtensorMap map_of(const void* base, bool bf16, const Strides4& st, int64_t batch, int64_t len,
                          int64_t heads, int64_t head_dim, uint32_t rows) {
  const uint64_t dims[4] = {static_cast<uint64_t>(head_dim), static_cast<uint64_t>(heads),
                            static_cast<uint64_t>(len), static_cast<uint64_t>(batch)};
  const uint64_t strides[3] = {static_cast<uint64_t>(st.h) * 2, static_cast<uint64_t>(st.l) * 2,
                               static_cast<uint64_t>(st.b) * 2};
  const uint32_t box[4] = {64, 1, rows, 1};
  return make_tensor_map_16bit(base, bf16, 4, dims, strides, box, true);
}

// The [B, L, H, D] view a tensor map covers: a packed varlen tensor ([total, H, D], batch
// stride 0) is one batch entry of `total` rows, its batch stride any valid one.
struct MapView {
  Strides4 strides;
  int64_t batch, len;
};
inline MapView map_view(const Strides4& st, int64_t batch, int64_t len, bool packed, int64_t total) {
  if (!packed) return MapView{st, batch, len};
  Strides4 s = st;
  s.b = st.l * (total > 0 ? total : 1);
  return MapView{s, 1, total};
}

}  // namespace tileattn::detail::sm90
