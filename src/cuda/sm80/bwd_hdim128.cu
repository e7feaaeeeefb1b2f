// bwd_hdim128.cu: the sm80 backward kernels for head dim 128 (bf16, fp16) x (NoMask, WindowMask).
#include "cuda/sm80/bwd_launch.cuh"

namespace tileattn::detail::sm80 {
template void backward_hdim<128>(const BackwardParams&, const BwdKernelParams&);
}  // namespace tileattn::detail::sm80
