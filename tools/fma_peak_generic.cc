// fma_peak_generic.cc: the peak kernel for baseline x86-64 (SSE2: a multiply and an add, no FMA).
#define TILEATTN_FMA_NS fma_generic
#define TILEATTN_FMA_ISA "generic"
namespace tileattn::cli::fma_generic {
constexpr int kLanes = 4;    // floats per vector
constexpr int kChains = 12;  // independent accumulators
}  // namespace tileattn::cli::fma_generic
#include "fma_peak_kernel.inc"
