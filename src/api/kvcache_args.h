// kvcache_args.h: forward_kvcache's arguments as the host sees them, for the CPU and the CUDA
// paths alike: ranks, shapes, dtypes, devices and aliasing checked (kvcache_args.cc), index
// values left to common/kvcache_check.h (read on the host for CPU tensors, on the device for
// CUDA ones).
#pragma once

#include <cstdint>
#include <optional>

#include "common/kvcache_check.h"
#include "common/params.h"
#include "tileattn/error.h"
#include "tileattn/kvcache.h"

namespace tileattn::detail {

// What the host knows of a call once its arguments are checked.
struct KvPlan {
  int64_t batch = 0, head_dim = 0, heads_q = 0, heads_kv = 0;
  int64_t page_size = 0, max_pages = 0, capacity = 0;  // capacity: positions a sequence can hold
  int64_t rotary_half = 0;                             // rotary_dim / 2 (0: no rotary)
  bool paged = false, varlen_q = false, packed_new = false, positional_q = false;
  // The index values' sizes for find_kvcache_fault (pointers left null: the caller's memory).
  KvIndices indices;
};

// Checks everything the host can see without reading an index tensor's values; throws the Error.
KvPlan plan_kvcache(const TensorRef& q, const KvCache& c, const TensorRef& out, const TensorRef* lse,
                    const Options& options);

// The Error of a fault find_kvcache_fault found (the same text on the host and the device);
// nullopt for kKvFaultNone.
std::optional<Error> kvcache_fault_error(const KvFault& fault);

// q, out, lse and the options as forward() checks them, against keys of the cache's shape
// [B, max_k, Hkv, D], then the cache's own layout: k/v pointers and strides, and the page table
// and batch index pointers (host or device memory, as the kernel runs). Throws the Error.
AttnParams kvcache_params(const KvPlan& plan, const TensorRef& q, const KvCache& c, const TensorRef& out,
                          const TensorRef* lse, const Options& options, int64_t max_k, const int32_t* table,
                          const int32_t* batch_idx);

}  // namespace tileattn::detail
