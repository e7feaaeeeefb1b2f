// seqlens_check.h: the value checks of a varlen batch's index tensors, one function for the
// host (CPU tensors) and the device (CUDA's checked mode), so both report the same faults.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail {

enum IndexFaultCode : int {
  kFaultNone = 0,
  kFaultCuFirst,      // cu_seqlens[0] != 0
  kFaultCuDecreases,  // cu_seqlens[i] < cu_seqlens[i - 1]
  kFaultCuLast,       // cu_seqlens[B] != the tensor's row count
  kFaultUsed,         // seqused[b] outside [0, the sequence's length]
  kFaultMax,          // max_seqlen below a sequence's (used) length
};

struct IndexCheck {
  const int32_t* cu = nullptr;    // [B + 1] or null
  const int32_t* used = nullptr;  // [B] or null
  int64_t rows = 0;               // the packed tensor's row count (with cu), or the dense length
  int64_t max_len = -1;           // the given maximum (-1: none given)
};

struct IndexFaultAt {
  int code = kFaultNone;
  int64_t index = 0, value = 0, limit = 0;
};

// The first fault of one side (q or k) of a batch of B sequences; *longest gets the longest
// used length.
TILEATTN_HD IndexFaultAt find_index_fault(const IndexCheck& c, int64_t batch, int64_t* longest) {
  IndexFaultAt f;
  *longest = 0;
  if (c.cu) {
    if (c.cu[0] != 0) return {kFaultCuFirst, 0, c.cu[0], 0};
    for (int64_t i = 1; i <= batch; ++i)
      if (c.cu[i] < c.cu[i - 1]) return {kFaultCuDecreases, i, c.cu[i], c.cu[i - 1]};
    if (c.cu[batch] != c.rows) return {kFaultCuLast, batch, c.cu[batch], c.rows};
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = c.cu ? c.cu[b + 1] - c.cu[b] : c.rows;
    int64_t used = len;
    if (c.used) {
      used = c.used[b];
      if (used < 0 || used > len) return {kFaultUsed, b, used, len};
    }
    if (c.max_len >= 0 && used > c.max_len) return {kFaultMax, b, used, c.max_len};
    if (used > *longest) *longest = used;
  }
  return f;
}

}  // namespace tileattn::detail
