// sm80.h: host entry points of the sm80 kernel, one per compiled head dim (no CUDA headers here).
#pragma once

#include "common/params.h"
#include "cuda/sm80/bwd_params.h"

namespace tileattn::detail::sm80 {

// Runs the forward kernel compiled for head dim kHeadDim (64, 96, 128 or 256) on a validated
// problem whose head dim is at most kHeadDim, on p.cuda_stream and the current device.
template <int kHeadDim>
void forward_hdim(const AttnParams& p);

extern template void forward_hdim<64>(const AttnParams&);
extern template void forward_hdim<96>(const AttnParams&);
extern template void forward_hdim<128>(const AttnParams&);
extern template void forward_hdim<256>(const AttnParams&);

// The backward (bwd_kernel.cuh): the preprocessing of kp's rows, then the dK/dV and dQ kernels
// compiled for head dim kHeadDim (64, 128, 256; smaller head dims run padded), on the stream.
// The preprocessing zeroes zero[0, zero_floats) in the same pass (the sm90 backward's fp32 dQ
// sums; zero 16-byte aligned).
void bwd_preprocess(const BwdKernelParams& kp, DType dtype, void* stream, float* zero = nullptr,
                    int64_t zero_floats = 0);
template <int kHeadDim>
void backward_hdim(const BackwardParams& b, const BwdKernelParams& kp);
extern template void backward_hdim<64>(const BackwardParams&, const BwdKernelParams&);
extern template void backward_hdim<128>(const BackwardParams&, const BwdKernelParams&);
extern template void backward_hdim<256>(const BackwardParams&, const BwdKernelParams&);

constexpr int bwd_padded_head_dim(int64_t head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
}

}  // namespace tileattn::detail::sm80
