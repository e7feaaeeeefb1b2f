// kernels_avx512.cc: the SIMD kernels built for avx512 (flags set in CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>

#define TILEATTN_SIMD_NS avx512
#define TILEATTN_SIMD_ISA "avx512"
#define TILEATTN_SIMD_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
namespace tileattn::detail::avx512 {
constexpr int kW = 16;  // floats per vector
constexpr int kMR = 6;  // micro-kernel rows
constexpr int kNV = 4;  // micro-kernel vectors per row
}  // namespace tileattn::detail::avx512
#include "simd/kernels.inc"
