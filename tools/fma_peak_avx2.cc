// fma_peak_avx2.cc: the FMA peak kernel for avx2 (flags set in CMakeLists.txt).
#define TILEATTN_FMA_NS fma_avx2
#define TILEATTN_FMA_ISA "avx2"
namespace tileattn::cli::fma_avx2 {
constexpr int kLanes = 8;    // floats per vector
constexpr int kChains = 12;  // independent accumulators
}  // namespace tileattn::cli::fma_avx2
#include "fma_peak_kernel.inc"
