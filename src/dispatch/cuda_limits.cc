// cuda_limits.cc: what the CUDA kernels accept, as a pure function of the problem.
#include <string>

#include "dispatch/limits.h"
#include "dispatch/select.h"

namespace tileattn::detail {

std::string cuda_kernel_rejects(const AttnParams& p, Kernel kernel) {
  if (kernel == Kernel::kCudaSm90) return "the sm90 kernel is not part of this build yet";
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return std::string("dtype ") + dtype_name(p.dtype) + " is not supported on CUDA; expected fp16 or bf16";
  if (p.head_dim % 8 != 0 || p.head_dim > kCudaMaxHeadDim)
    return "head_dim " + std::to_string(p.head_dim) + " is not supported on CUDA; expected a multiple of 8 up to " +
           std::to_string(kCudaMaxHeadDim);
  const Strides4* strides[] = {&p.q_stride, &p.k_stride, &p.v_stride, &p.out_stride};
  const char* names[] = {"q", "k", "v", "out"};
  const void* ptrs[] = {p.q, p.k, p.v, p.out};
  for (int i = 0; i < 4; ++i) {
    const Strides4& s = *strides[i];
    if (s.d != 1)
      return std::string(names[i]) + ": head_dim stride is " + std::to_string(s.d) + "; CUDA needs it to be 1";
    // 16-byte vector loads: every row start must be 16-byte aligned.
    if (s.b % 8 || s.l % 8 || s.h % 8)
      return std::string(names[i]) + ": strides (" + std::to_string(s.b) + ", " + std::to_string(s.l) + ", " +
             std::to_string(s.h) + ") must be multiples of 8 elements (16 bytes) on CUDA";
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16)
      return std::string(names[i]) + ": data pointer is not 16-byte aligned";
  }
  return {};
}

}  // namespace tileattn::detail
