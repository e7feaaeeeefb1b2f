// prefetch.h: software prefetch of rows that the hardware's prefetchers do not see coming.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace tileattn::detail::cpu {

// Prefetches into L2 the `n` rows of `D` elements from `base` at element offsets offset(i): rows
// of one head lie H x D elements apart (kilobytes), out of reach of the hardware's stream
// prefetch, which stays within a 4 KiB page, so each row's first touch would wait on memory.
template <class Offset>
inline void prefetch_rows(const void* base, DType dtype, int64_t D, int64_t d_stride, int64_t n,
                          Offset offset) {
  if (d_stride != 1) return;
  const int64_t bytes = D * static_cast<int64_t>(dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {  // every cache line the row touches
    const char* row = element_ptr(base, dtype, offset(i));
    const char* line = row - reinterpret_cast<uintptr_t>(row) % 64;
    for (; line < row + bytes; line += 64) __builtin_prefetch(line, 0, 2);
  }
}

}  // namespace tileattn::detail::cpu
