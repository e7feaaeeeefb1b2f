// kernels_generic.cc: the SIMD kernels built for generic (flags set in CMakeLists.txt).
#include <algorithm>
#include <array>
#include <cmath>

#define TILEATTN_SIMD_NS generic
#define TILEATTN_SIMD_ISA "generic"
#define TILEATTN_SIMD_FMA(a, b, c) (a) * (b) + (c) /* no FMA unit assumed: rounded twice */
namespace tileattn::detail::generic {
constexpr int kW = 4;   // floats per vector
constexpr int kMR = 4;  // micro-kernel rows
constexpr int kNV = 2;  // micro-kernel vectors per row
}  // namespace tileattn::detail::generic
#include "simd/kernels.inc"
