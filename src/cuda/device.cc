// device.cc: device queries for selection (count, compute capability), cached per process.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_api.h"

namespace tileattn::detail::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    // No driver or no GPU is not an error here: it means "no CUDA devices".
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

DeviceInfo device_info(int index) {
  static std::mutex mutex;
  static std::vector<DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.empty()) {
    cache.resize(device_count());
    for (int i = 0; i < static_cast<int>(cache.size()); ++i) {
      cudaDeviceProp prop{};
      TILEATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
      cache[i] = DeviceInfo{prop.major, prop.minor, prop.multiProcessorCount, prop.name};
    }
  }
  if (index < 0 || index >= static_cast<int>(cache.size()))
    throw RuntimeError("device_info: no CUDA device " + std::to_string(index));
  return cache[index];
}

int* stream_scratch(int device, void* stream, int64_t ints) {
  const auto s = static_cast<cudaStream_t>(stream);
  unsigned long long id = 0;
  TILEATTN_CUDA_CHECK(cudaStreamGetId(s, &id));
  struct Scratch {
    int* ptr = nullptr;
    int64_t ints = 0;
  };
  static std::mutex mutex;
  static std::map<std::pair<int, unsigned long long>, Scratch> scratches;
  std::lock_guard<std::mutex> lock(mutex);
  Scratch& have = scratches[{device, id}];
  if (have.ints < ints) {
    // Stream-ordered: the launches before this one on the stream still use the old ints, and
    // freed after them; the new ones are zero before the next launch.
    const int64_t grown = std::max<int64_t>(ints, 2 * have.ints);
    int* fresh = nullptr;
    TILEATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&fresh), grown * sizeof(int), s));
    TILEATTN_CUDA_CHECK(cudaMemsetAsync(fresh, 0, grown * sizeof(int), s));
    if (have.ptr) TILEATTN_CUDA_CHECK(cudaFreeAsync(have.ptr, s));
    have = Scratch{fresh, grown};
  }
  return have.ptr;
}

}  // namespace tileattn::detail::cuda
