// kernels_avx2.cc: the SIMD kernels built for avx2 (flags set in CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>

#define TILEATTN_SIMD_NS avx2
#define TILEATTN_SIMD_ISA "avx2"
#define TILEATTN_SIMD_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
namespace tileattn::detail::avx2 {
constexpr int kW = 8;   // floats per vector
constexpr int kMR = 6;  // micro-kernel rows
constexpr int kNV = 2;  // micro-kernel vectors per row
}  // namespace tileattn::detail::avx2
#include "simd/kernels.inc"
