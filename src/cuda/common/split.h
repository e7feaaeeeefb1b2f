// split.h: split-KV around a kernel launch: how many splits, the partial states' memory, and
// the merge (DESIGN.md section 6).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "common/params.h"
#include "common/partial.h"
#include "cuda/common/kernel_params.h"
#include "cuda/cuda_api.h"

namespace tileattn::detail::cuda {

// p.num_splits when forced, else the heuristic of dispatch/splits.h for `tiles` unsplit tiles
// whose longest walks `key_blocks` key blocks, on p's device.
int resolve_splits(const AttnParams& p, int64_t tiles, int64_t key_blocks);

// The fp32 partial states of one call, allocated on its stream (stream-ordered, so capturable
// into a CUDA graph) and freed on it when the call ends.
class Partials {
 public:
  Partials(const AttnParams& p, int splits);
  ~Partials();
  Partials(const Partials&) = delete;
  Partials& operator=(const Partials&) = delete;
  float* o() const { return o_; }
  float* lse() const { return lse_; }

 private:
  cudaStream_t stream_;
  float* o_ = nullptr;
  float* lse_ = nullptr;
};

// launch(kp) once; with kp.splits > 1 into partial states that are then merged into p.out /
// p.lse: by the kernel itself when it says so (launch returns true: kp.arrivals), else by the
// combine kernel.
template <class Launch>
void run_split(const AttnParams& p, KernelParams kp, Launch&& launch) {
  if (kp.splits <= 1) {
    std::forward<Launch>(launch)(kp);
    return;
  }
  const Partials partials(p, kp.splits);
  set_partials(kp, p, partials.o(), partials.lse());
  if (!std::forward<Launch>(launch)(kp)) combine(partial_combine(p, partials.o(), partials.lse(), kp.splits));
}

}  // namespace tileattn::detail::cuda
