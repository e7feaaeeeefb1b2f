// aligned.h: std::vector storage on 64-byte boundaries. The CPU kernels' buffers hold rows padded
// to whole vectors, so with this every row starts on a cache line and no 64-byte vector load
// splits across two (split loads made the fp32 GEMM 1.2-1.4x slower on a Xeon with AVX-512).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tileattn::detail {

template <class T>
struct CacheAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheAligned() = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheAligned<U>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheAligned<T>>;

}  // namespace tileattn::detail
