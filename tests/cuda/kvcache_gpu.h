// kvcache_gpu.h: forward_kvcache test cases (tests/kvcache_case.h) run on the GPU: every tensor
// of a case mirrored on the device, the call made there, the caches and outputs copied back.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "cuda_case.h"
#include "kvcache_case.h"

namespace tileattn::cuda_test {

using test::KvCase;
using test::KvSpec;

// A case's inputs (caches included) on the device and the call's arguments over them.
class GpuKvCase {
 public:
  explicit GpuKvCase(const KvCase& kc);
  const KvCache& args() const { return args_; }
  TensorRef q() const;
  // The device caches back into kc's k_cache and v_cache.
  void caches_to_host(KvCase& kc) const;
  // Every input (caches and index tensors included) copied from its host tensor again.
  void from_host() const;

 private:
  std::vector<std::pair<const HostTensor*, std::unique_ptr<DeviceCopy>>> copies_;
  std::vector<TensorRef> refs_;
  KvCache args_;
};

// test::KvRun on the GPU: forward_kvcache in checked mode on the default stream, the outputs
// (poisoned first) and the caches copied back.
void run_kvcache_gpu(KvCase& kc, Result* r, const Options& options);

}  // namespace tileattn::cuda_test
