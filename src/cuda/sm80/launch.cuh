// launch.cuh: host-side launch of the sm80 kernel for one head dim: picks dtype and mask policy
// (cuda/common/launch.cuh), the split count, sets shared memory, launches on the stream.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/split.h"
#include "cuda/sm80/kernel.cuh"
#include "cuda/sm80/sm80.h"
#include "cuda/sm80/tile_config.h"

namespace tileattn::detail::sm80 {

template <class Tiles, class T, class Mask, bool kCache>
void launch(const AttnParams& p) {
  constexpr TileConfig kCfg = Tiles::kCfg;
  const int64_t tiles = (p.seqlen_q + kCfg.block_m - 1) / kCfg.block_m * p.heads_q * p.batch;
  const int splits =
      cuda::cap_splits(cuda::resolve_splits(p, tiles, (p.seqlen_k + kCfg.block_n - 1) / kCfg.block_n), tiles);
  auto* kernel = &attention_fwd_sm80<Tiles, T, Mask, kCache>;
  cuda::set_max_dynamic_smem<&attention_fwd_sm80<Tiles, T, Mask, kCache>>(kCfg.smem_bytes(), p.device_index);
  cuda::run_split(p, cuda::make_kernel_params(p, kCfg.block_m, 1, splits), [&](const cuda::KernelParams& kp) {
    kernel<<<dim3(static_cast<unsigned>(kp.tiles)), Tiles::kCfg.threads(), Tiles::kCfg.smem_bytes(),
             static_cast<cudaStream_t>(p.cuda_stream)>>>(kp);
    TILEATTN_CUDA_CHECK_LAUNCH();
    return false;  // split-KV: the combine kernel merges
  });
}

template <int kHeadDim>
void forward_hdim(const AttnParams& p) {
  using Tiles = DefaultTiles<kHeadDim>;
  static_assert(Tiles::kCfg.head_dim == kHeadDim, "tile_config covers every compiled head dim");
  const bool cache = p.page_table != nullptr || p.kv_batch_idx != nullptr;  // a KV cache's rows
  cuda::for_dtype_and_mask(p, [&](auto element, auto mask) {
    using T = decltype(element);
    using Mask = typename decltype(mask)::type;
    if (cache)
      launch<Tiles, T, Mask, true>(p);
    else
      launch<Tiles, T, Mask, false>(p);
  });
}

}  // namespace tileattn::detail::sm80
