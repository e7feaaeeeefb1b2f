// forward.cu: the sm90 forward's dispatch over head dim, dtype and mask. Instantiations: D in
// {64, 128, 256} x {bf16, fp16} x {NoMask, WindowMask}, compiled for sm_90a only (other
// targets get empty kernels).
#include <cuda_runtime.h>

#include <string>

#include "cuda/sm90/launch.cuh"
#include "cuda/sm90/sm90.h"

namespace tileattn::detail::sm90 {
namespace {

template <int kD, class T>
void launch_masked(const AttnParams& p) {
  if (!p.has_window())
    launch<DefaultConfig<kD>, T>(p, NoMask{p.seqlen_k});
  else
    launch<DefaultConfig<kD>, T>(p, WindowMask{p.seqlen_k, p.seqlen_k - p.seqlen_q, p.window_left, p.window_right});
}

template <int kD>
void forward_hdim(const AttnParams& p) {
  if (p.dtype == DType::kBFloat16)
    launch_masked<kD, __nv_bfloat16>(p);
  else
    launch_masked<kD, __half>(p);
}

}  // namespace

void forward(const AttnParams& p) {
  // Zero-length dims make no tensor map; such problems write only O = 0 / LSE = -inf rows,
  // which the sm80 kernel handles (selection never sends them here).
  if (p.head_dim == 64)
    forward_hdim<64>(p);
  else if (p.head_dim == 128)
    forward_hdim<128>(p);
  else if (p.head_dim == 256)
    forward_hdim<256>(p);
  else
    throw RuntimeError("sm90: head_dim " + std::to_string(p.head_dim) + " has no kernel");
}

}  // namespace tileattn::detail::sm90
