// split.cc: split counts and the partial states' memory.
#include "cuda/common/split.h"

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "dispatch/splits.h"

namespace tileattn::detail::cuda {

int resolve_splits(const AttnParams& p, int64_t tiles, int64_t key_blocks) {
  if (p.num_splits > 0) return p.num_splits;
  return cuda_num_splits(tiles, device_info(p.device_index).sm_count, key_blocks, kMaxSplits);
}

Partials::Partials(const AttnParams& p, int splits) : stream_(static_cast<cudaStream_t>(p.cuda_stream)) {
  TILEATTN_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&o_), partial_o_elems(p, splits) * sizeof(float), stream_));
  const cudaError_t err =
      cudaMallocAsync(reinterpret_cast<void**>(&lse_), partial_lse_elems(p, splits) * sizeof(float), stream_);
  if (err != cudaSuccess) {
    (void)cudaFreeAsync(o_, stream_);
    throw_cuda(err, "cudaMallocAsync (split-KV LSE)", __FILE__, __LINE__);
  }
}

Partials::~Partials() {
  (void)cudaFreeAsync(o_, stream_);
  (void)cudaFreeAsync(lse_, stream_);
}

}  // namespace tileattn::detail::cuda
