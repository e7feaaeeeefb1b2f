// limits.h: what each kernel accepts, in one place, so selection stays a pure function.
#pragma once

#include <cstdint>

namespace tileattn::detail {

// CPU: any head dim up to 512. Each thread keeps Q, K^T, V and O tiles of 64 x D fp32; at
// D = 512 that is 512 KiB, which still sits in a 1-2 MiB L2. Larger D would need a smaller
// query tile; nobody ships such heads, so the limit stays here.
inline constexpr int64_t kCpuMaxHeadDim = 512;

// CUDA sm80 kernel: head dims instantiated (others that are multiples of 8 up to 256 are padded
// to the next one); see src/cuda/sm80/tile_config.h for why each tile is what it is.
inline constexpr int64_t kCudaMaxHeadDim = 256;

}  // namespace tileattn::detail
