// tileattn/version.h: library version and what this build can run.
#pragma once

namespace tileattn {

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;

const char* version();            // "0.1.0"
bool built_with_cuda();           // true when the CUDA kernels were compiled in
bool built_with_cuda_backward();  // true when the CUDA backward kernels were too
int cuda_device_count();          // 0 without CUDA or without a GPU
const char* cpu_isa();  // the CPU kernels' SIMD level: "amx", "avx512bf16", "avx512", "avx2", "generic"

}  // namespace tileattn
