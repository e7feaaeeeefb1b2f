// launch.cuh: the two template axes every CUDA forward kernel has besides its tiles: the element
// type (bf16, fp16) and the mask policy (NoMask, or WindowMask, which covers causal, sliding
// windows and their mix, all bottom-right aligned per sequence).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <type_traits>

#include "common/mask.h"
#include "common/params.h"
#include "cuda/check.h"

namespace tileattn::detail::cuda {

// f(T{}, std::type_identity<Mask>{}) for p's dtype and mask.
template <class F>
void for_dtype_and_mask(const AttnParams& p, F&& f) {
  const auto with_mask = [&](auto element) {
    if (!p.has_window())
      f(element, std::type_identity<NoMask>{});
    else
      f(element, std::type_identity<WindowMask>{});
  };
  if (p.dtype == DType::kBFloat16)
    with_mask(__nv_bfloat16{});
  else
    with_mask(__half{});
}

// A kernel's opt-in to more than 48 KB of dynamic shared memory: an attribute of the kernel on
// each device, set once per device (the driver call costs microseconds a launch otherwise).
// The kernel is the template argument, so each kernel has its own record.
template <auto kKernel>
void set_max_dynamic_smem(int bytes, int device) {
  static std::array<std::atomic<bool>, 64> done{};
  if (device >= 0 && device < 64 && done[device].load(std::memory_order_acquire)) return;
  TILEATTN_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (device >= 0 && device < 64) done[device].store(true, std::memory_order_release);
}

// Split counts are capped so that the grid's tiles stay below 2^31.
inline int cap_splits(int splits, int64_t tiles) {
  const int64_t most = tiles > 0 ? ((int64_t{1} << 31) - 1) / tiles : splits;
  return static_cast<int>(splits < most ? splits : (most > 0 ? most : 1));
}

}  // namespace tileattn::detail::cuda
