// bwd_launch.cuh: host-side launch of the sm80 backward kernels for one head dim: dtype x mask
// dispatch, shared-memory attributes, the dK/dV launch (two passes at D = 256) and the dQ launch
// on the caller's stream.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/sm80/bwd_kernel.cuh"
#include "cuda/sm80/sm80.h"

namespace tileattn::detail::sm80 {

template <int kHeadDim>
struct BwdTilesOf {
  static constexpr BwdTiles kCfg{kHeadDim};
};

template <class Tiles, class T, class Mask, BwdPass kPass>
void launch_dkdv(const BwdKernelParams& kp, cudaStream_t stream, int device) {
  constexpr BwdTiles kCfg = Tiles::kCfg;
  cuda::set_max_dynamic_smem<&attention_bwd_dkdv_sm80<Tiles, T, Mask, kPass>>(kCfg.dkdv_smem(), device);
  const auto ctas = static_cast<unsigned>(kp.n_blocks * kp.heads_kv * kp.batch);
  attention_bwd_dkdv_sm80<Tiles, T, Mask, kPass>
      <<<dim3(ctas), kCfg.threads(), kCfg.dkdv_smem(), stream>>>(kp);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

template <class Tiles, class T, class Mask>
void launch_bwd(const BwdKernelParams& kp, cudaStream_t stream, int device) {
  constexpr BwdTiles kCfg = Tiles::kCfg;
  if (kp.n_blocks > 0 && kp.heads_kv > 0) {
    if constexpr (kCfg.two_passes()) {
      launch_dkdv<Tiles, T, Mask, BwdPass::kDv>(kp, stream, device);
      launch_dkdv<Tiles, T, Mask, BwdPass::kDk>(kp, stream, device);
    } else {
      launch_dkdv<Tiles, T, Mask, BwdPass::kBoth>(kp, stream, device);
    }
  }
  if (kp.m_blocks > 0) {
    cuda::set_max_dynamic_smem<&attention_bwd_dq_sm80<Tiles, T, Mask>>(kCfg.dq_smem(), device);
    const auto ctas = static_cast<unsigned>(kp.m_blocks * kp.f.heads_q * kp.batch);
    attention_bwd_dq_sm80<Tiles, T, Mask><<<dim3(ctas), kCfg.threads(), kCfg.dq_smem(), stream>>>(kp);
    TILEATTN_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim>
void backward_hdim(const BackwardParams& b, const BwdKernelParams& kp) {
  const auto stream = static_cast<cudaStream_t>(b.fwd.cuda_stream);
  cuda::for_dtype_and_mask(b.fwd, [&](auto element, auto mask) {
    launch_bwd<BwdTilesOf<kHeadDim>, decltype(element), typename decltype(mask)::type>(kp, stream,
                                                                                       b.fwd.device_index);
  });
}

}  // namespace tileattn::detail::sm80
