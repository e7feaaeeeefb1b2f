// fill.h: device-side fill and NaN count for test tensors too large to stage on the host, and the
// host-side twin of the fill (the value of element i is a hash of i, so any row can be rebuilt).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TILEATTN_TEST_HD __host__ __device__
#else
#define TILEATTN_TEST_HD
#endif

namespace tileattn::cuda_test {

// A value in [-1, 1) from the index (splitmix64), exactly representable in fp32.
TILEATTN_TEST_HD inline float hash_unit(uint64_t i, uint64_t seed) {
  uint64_t z = i + seed * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) * (1.0f / (1 << 23));
}

// Element i of n bf16 values := bf16(hash_unit(i, seed)), on the device (synchronous).
void fill_hash_bf16(void* device_data, int64_t n, uint64_t seed);
// How many of n device bf16 values are NaN (synchronous).
int64_t count_nan_bf16(const void* device_data, int64_t n);
// How many of n device fp32 values are NaN (synchronous).
int64_t count_nan32(const void* device_data, int64_t n);

}  // namespace tileattn::cuda_test
