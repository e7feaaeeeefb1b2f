// kvcache_check.h: the value checks of forward_kvcache's index tensors, one function for the
// host (CPU tensors, always) and the device (CUDA's checked mode), so both report the same faults.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail {

enum KvFaultCode : int {
  kKvFaultNone = 0,
  kKvFaultNewFirst,      // cu_seqlens_k_new[0] != 0
  kKvFaultNewDecreases,  // cu_seqlens_k_new[b + 1] < cu_seqlens_k_new[b]
  kKvFaultNewLast,       // cu_seqlens_k_new[B] != k_new's rows
  kKvFaultSeqlen,        // cache_seqlens[b] outside 0..capacity
  kKvFaultCapacity,      // cache_seqlens[b] + new keys > capacity
  kKvFaultLeftpad,       // cache_leftpad[b] outside 0..cache_seqlens[b]
  kKvFaultBatchIdx,      // cache_batch_idx[b] outside the cache's rows
  kKvFaultPage,          // page_table[b, j] outside the pages (only the pages a sequence uses)
  kKvFaultRotary,        // a position past rotary_cos's rows
};

// The index tensors (contiguous int32, host or device pointers as the checker runs; null: not
// given) and the sizes the host knows.
struct KvIndices {
  const int32_t* seqlens = nullptr;    // [B]; null: every sequence holds `capacity` keys
  const int32_t* batch_idx = nullptr;  // [B]
  const int32_t* leftpad = nullptr;    // [B]
  const int32_t* table = nullptr;      // [B, table_stride]
  const int32_t* cu_new = nullptr;     // [B + 1]
  const int32_t* cu_q = nullptr;       // [B + 1] (values checked by find_index_fault first)
  int64_t batch = 0, capacity = 0, page_size = 1, table_stride = 0;
  int64_t cache_rows = 0;     // k_cache's dim 0: cache rows, or pages
  int64_t new_len = 0;        // dense k_new's seqlen (0: no new keys)
  int64_t new_rows = 0;       // packed k_new's rows (with cu_new)
  int64_t len_q = 0;          // dense q's seqlen
  int64_t rotary_rows = -1;   // rotary_cos's rows (-1: no rotary)
  bool positional_q = false;  // q rotated at cache_seqlens + i (causal or windowed)

  TILEATTN_HD int64_t seqlen(int64_t b) const { return seqlens ? seqlens[b] : capacity; }
  TILEATTN_HD int64_t new_keys(int64_t b) const { return cu_new ? cu_new[b + 1] - cu_new[b] : new_len; }
  TILEATTN_HD int64_t queries(int64_t b) const { return cu_q ? cu_q[b + 1] - cu_q[b] : len_q; }
};

// b, j: the sequence (or entry) and page; value and limit: the bad value and what bounds it.
struct KvFault {
  int code = kKvFaultNone;
  int64_t b = 0, j = 0, value = 0, limit = 0, extra = 0;
};

// The first fault, in the order the arguments are documented (kvcache.h).
TILEATTN_HD KvFault find_kvcache_fault(const KvIndices& x) {
  const int64_t B = x.batch;
  if (x.cu_new) {
    if (x.cu_new[0] != 0) return {kKvFaultNewFirst, 0, 0, x.cu_new[0], 0, 0};
    for (int64_t b = 0; b < B; ++b)
      if (x.cu_new[b + 1] < x.cu_new[b]) return {kKvFaultNewDecreases, b + 1, 0, x.cu_new[b + 1], 0, 0};
    if (x.cu_new[B] != x.new_rows) return {kKvFaultNewLast, B, 0, x.cu_new[B], x.new_rows, 0};
  }
  int64_t last = -1;  // the last rotary position needed
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = x.seqlen(b), total = len + x.new_keys(b);
    if (len < 0 || len > x.capacity) return {kKvFaultSeqlen, b, 0, len, x.capacity, 0};
    if (total > x.capacity) return {kKvFaultCapacity, b, 0, len, x.capacity, x.new_keys(b)};
    const int64_t first = x.leftpad ? x.leftpad[b] : 0;
    if (first < 0 || first > len) return {kKvFaultLeftpad, b, 0, first, len, 0};
    if (x.batch_idx && (x.batch_idx[b] < 0 || x.batch_idx[b] >= x.cache_rows))
      return {kKvFaultBatchIdx, b, 0, x.batch_idx[b], x.cache_rows - 1, 0};
    const int64_t page_size = x.page_size > 0 ? x.page_size : 1;
    for (int64_t j = first / page_size; x.table && j * page_size < total; ++j) {
      const int64_t page = x.table[b * x.table_stride + j];
      if (page < 0 || page >= x.cache_rows) return {kKvFaultPage, b, j, page, x.cache_rows - 1, 0};
    }
    const int64_t q_last = len + (x.positional_q ? x.queries(b) - 1 : 0);
    last = last > total - 1 ? last : total - 1;
    last = last > q_last ? last : q_last;
  }
  if (x.rotary_rows >= 0 && last >= x.rotary_rows) return {kKvFaultRotary, 0, 0, last, x.rotary_rows, 0};
  return {};
}

}  // namespace tileattn::detail
