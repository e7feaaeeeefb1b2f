// fwd_hdim96.cu: the sm80 forward kernel for head dim 96 (bf16, fp16) x (NoMask, WindowMask).
// One translation unit per head dim so the builds run in parallel.
#include "cuda/sm80/launch.cuh"

namespace tileattn::detail::sm80 {
template void forward_hdim<96>(const AttnParams&);
}  // namespace tileattn::detail::sm80
