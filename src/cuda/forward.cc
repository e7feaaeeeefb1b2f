// forward.cc: runs a validated problem on the CUDA kernel selection chose.
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "cuda/sm80/sm80.h"
#include "cuda/sm80/tile_config.h"
#include "cuda/sm90/sm90.h"

namespace tileattn::detail::cuda {
bool sm90_built() {
#if defined(TILEATTN_SM90_FORWARD)
  return true;
#else
  return false;
#endif
}

void forward(const AttnParams& p, Kernel kernel) {
  if (kernel != Kernel::kCudaSm80 && !(kernel == Kernel::kCudaSm90 && sm90_built()))
    throw RuntimeError(std::string("kernel ") + kernel_name(kernel) + " is not in this build");
  if (p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0) return;  // nothing to write
  DeviceGuard guard(p.device_index);
  if (kernel == Kernel::kCudaSm90) {
    sm90::forward(p);
    return;
  }
  switch (sm80::padded_head_dim(p.head_dim)) {
    case 64:
      sm80::forward_hdim<64>(p);
      break;
    case 96:
      sm80::forward_hdim<96>(p);
      break;
    case 128:
      sm80::forward_hdim<128>(p);
      break;
    case 256:
      sm80::forward_hdim<256>(p);
      break;
    default:
      throw RuntimeError("sm80: head_dim " + std::to_string(p.head_dim) + " has no kernel");
  }
}

}  // namespace tileattn::detail::cuda
