// tensor_map.h: host-side creation of TMA tensor maps, without linking libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tileattn::detail::sm90 {

// A tiled tensor map over `rank` dims, innermost first: dims[i] elements, byte strides for dims
// 1.. (multiples of 16), a box of box[i] elements, 16-bit elements (bf16 or fp16), 128-byte
// swizzle when box[0] * 2 == 128. Out-of-bounds elements load as zero. Throws RuntimeError
// with the driver's code when the driver rejects the map.
CUtensorMap make_tensor_map_16bit(const void* base, bool bf16, int rank, const uint64_t* dims,
                                  const uint64_t* byte_strides, const uint32_t* box, bool swizzle_128b);

}  // namespace tileattn::detail::sm90
