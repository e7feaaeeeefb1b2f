// forward.cu: the sm90 forward's dispatch over head dim, dtype and mask. Instantiations: D in
// {64, 128, 256} x {bf16, fp16} x {NoMask, WindowMask}, compiled for sm_90a only (other
// targets get empty kernels).
#include <cuda_runtime.h>

#include <string>

#include "cuda/sm90/launch.cuh"
#include "cuda/sm90/sm90.h"

namespace tileattn::detail::sm90 {

void forward(const AttnParams& p) {
  // Zero-length dims make no tensor map; such problems write only O = 0 / LSE = -inf rows,
  // which the sm80 kernel handles (selection never sends them here).
  if (p.head_dim == 64)
    launch_for<DefaultConfig<64>>(p);
  else if (p.head_dim == 128)
    launch_for<DefaultConfig<128>, ServingConfig<128>>(p);
  else if (p.head_dim == 256)
    launch_for<DefaultConfig<256>>(p);
  else
    throw RuntimeError("sm90: head_dim " + std::to_string(p.head_dim) + " has no kernel");
}

}  // namespace tileattn::detail::sm90
