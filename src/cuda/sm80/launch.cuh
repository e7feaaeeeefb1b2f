// launch.cuh: host-side launch of the sm80 kernel for one head dim: picks dtype and mask policy
// (the only template axes besides the head dim), sets shared memory, launches on the stream.
#pragma once

#include <cuda_runtime.h>

#include "common/mask.h"
#include "cuda/check.h"
#include "cuda/sm80/kernel.cuh"
#include "cuda/sm80/kernel_params.h"
#include "cuda/sm80/sm80.h"
#include "cuda/sm80/tile_config.h"

namespace tileattn::detail::sm80 {

template <class Tiles, class T, class Mask>
void launch(const AttnParams& p, const Mask& mask) {
  constexpr TileConfig kCfg = Tiles::kCfg;
  const KernelParams kp = make_kernel_params(p, kCfg.block_m, mask.band());
  const int64_t ctas = kp.tiles;  // < 2^31: checked by cuda_kernel_rejects
  auto* kernel = &attention_fwd_sm80<Tiles, T, Mask>;
  // Above 48 KB dynamic shared memory is opt-in, per device, so this is set on every launch.
  TILEATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kCfg.smem_bytes()));
  kernel<<<dim3(static_cast<unsigned>(ctas)), kCfg.threads(), kCfg.smem_bytes(),
           static_cast<cudaStream_t>(p.cuda_stream)>>>(kp, mask);
  TILEATTN_CUDA_CHECK_LAUNCH();
}

// Two mask policies: NoMask (only the ragged last key block is masked), and WindowMask, which
// covers causal (right = 0), sliding windows and their mix, all bottom-right aligned.
template <class Tiles, class T>
void launch_masked(const AttnParams& p) {
  if (!p.has_window())
    launch<Tiles, T>(p, NoMask{p.seqlen_k});
  else
    launch<Tiles, T>(p, p.window_mask());
}

template <int kHeadDim>
void forward_hdim(const AttnParams& p) {
  using Tiles = DefaultTiles<kHeadDim>;
  static_assert(Tiles::kCfg.head_dim == kHeadDim, "tile_config covers every compiled head dim");
  if (p.dtype == DType::kBFloat16)
    launch_masked<Tiles, __nv_bfloat16>(p);
  else
    launch_masked<Tiles, __half>(p);
}

}  // namespace tileattn::detail::sm80
