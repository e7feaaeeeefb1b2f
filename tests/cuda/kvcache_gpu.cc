// kvcache_gpu.cc: forward_kvcache cases on the GPU (kvcache_gpu.h).
#include "kvcache_gpu.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tileattn::cuda_test {

GpuKvCase::GpuKvCase(const KvCase& kc) {
  copies_.emplace_back(&kc.q, std::make_unique<DeviceCopy>(kc.q));
  args_ = kc.args(
      [&](const HostTensor& t) {
        copies_.emplace_back(&t, std::make_unique<DeviceCopy>(t));
        return copies_.back().second->ref();
      },
      &refs_);
}

TensorRef GpuKvCase::q() const { return copies_.front().second->ref(); }

void GpuKvCase::caches_to_host(KvCase& kc) const {
  for (const auto& [host, device] : copies_) {
    if (host == &kc.k_cache) device->to_host(kc.k_cache);
    if (host == &kc.v_cache) device->to_host(kc.v_cache);
  }
}

void GpuKvCase::from_host() const {
  for (const auto& copy : copies_) copy.second->from_host();
}

void run_kvcache_gpu(KvCase& kc, Result* r, const Options& options) {
  const GpuKvCase gpu(kc);
  const DeviceCopy out(r->out), lse(r->lse);
  const TensorRef lse_ref = lse.ref();
  Options o = options;
  o.check_indices = true;
  forward_kvcache(gpu.q(), gpu.args(), out.ref(), &lse_ref, o);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("forward_kvcache: ") + cudaGetErrorString(err));
  out.to_host(r->out);
  lse.to_host(r->lse);
  gpu.caches_to_host(kc);
}

}  // namespace tileattn::cuda_test
