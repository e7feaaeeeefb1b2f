// warpgroup.cuh: warpgroup roles and register reallocation (setmaxnreg, sm_90a).
#pragma once

#include <cstdint>

namespace tileattn::detail::sm90 {

inline constexpr int kWarpgroupThreads = 128;

__device__ __forceinline__ int warpgroup_index() {
  // Uniform across the warpgroup, which lets the compiler keep role branches convergent.
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// Moves registers between warpgroups. Takes effect only in a kernel with a register cap at
// entry (__launch_bounds__(threads, 1)), executed by every warp of the warpgroup.
template <uint32_t kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg takes 24..256, multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg takes 24..256, multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace tileattn::detail::sm90
