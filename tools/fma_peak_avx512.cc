// fma_peak_avx512.cc: the FMA peak kernel for avx512 (flags set in CMakeLists.txt).
#define TILEATTN_FMA_NS fma_avx512
#define TILEATTN_FMA_ISA "avx512"
namespace tileattn::cli::fma_avx512 {
constexpr int kLanes = 16;   // floats per vector
constexpr int kChains = 16;  // independent accumulators
}  // namespace tileattn::cli::fma_avx512
#include "fma_peak_kernel.inc"
