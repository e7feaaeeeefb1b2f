// tileattn/kvcache.h: attention over a KV cache, contiguous or paged, with the new tokens' keys
// and values appended in place (rotary applied first) in the same call: a decoding step.
#pragma once

#include <cstdint>

#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn {

// The cache and what a call adds to it (all index tensors int32, contiguous, on q's device).
//   k_cache, v_cache: [B_cache, L_max, Hkv, D] (contiguous cache), or with page_table the pages
//       [num_pages, page_size, Hkv, D] (any page_size >= 1). Written in place when k_new is given.
//   page_table [B, max_pages]: page j of sequence b holds its positions j * page_size ...
//   cache_seqlens [B]: the keys sequence b has before this call (null: L_max for every sequence
//       of a contiguous cache; required with page_table).
//   cache_batch_idx [B]: the cache row of sequence b (contiguous cache only; null: b).
//   cache_leftpad [B]: sequence b's keys start at this position (null: 0); its keys are then
//       positions [leftpad, cache_seqlens + new) of its cache.
//   k_new, v_new [B, L_new, Hkv, D] (or packed [total_new, Hkv, D] with cu_seqlens_k_new [B + 1]):
//       written at positions cache_seqlens[b] .. (rows past the capacity are an error, nothing is
//       written then) and attended to in the same call.
//   rotary_cos, rotary_sin [seqlen_ro, rotary_dim / 2] (q's dtype or fp32): rotary embedding of
//       the first rotary_dim dims of k_new at positions cache_seqlens[b] + i, and of q at
//       cache_seqlens[b] + i when causal or windowed (else every query at cache_seqlens[b]);
//       interleaved pairs (0, 1), (2, 3), ... or, with rotary_interleaved = false, the halves
//       (i, i + rotary_dim / 2) (GPT-NeoX). q itself is not modified.
//   cu_seqlens_q [B + 1], max_seqlen_q: a packed q [total_q, Hq, D] (out alike, lse [Hq, total_q]).
// Sequence b's queries attend to its keys with masks aligned bottom-right, as in forward().
struct KvCache {
  TensorRef k_cache, v_cache;
  const TensorRef* page_table = nullptr;
  const TensorRef* cache_seqlens = nullptr;
  const TensorRef* cache_batch_idx = nullptr;
  const TensorRef* cache_leftpad = nullptr;
  const TensorRef* k_new = nullptr;
  const TensorRef* v_new = nullptr;
  const TensorRef* cu_seqlens_k_new = nullptr;
  const TensorRef* rotary_cos = nullptr;
  const TensorRef* rotary_sin = nullptr;
  bool rotary_interleaved = true;
  const TensorRef* cu_seqlens_q = nullptr;
  int64_t max_seqlen_q = -1;
};

// q [B, Lq, Hq, D] (or packed, see above) against the cache; out like q, lse [B, Hq, Lq] fp32 or
// null. CPU tensors: everything is checked (index values included) before anything is written.
// CUDA tensors (fp16, bf16; the index tensors contiguous on q's device): the host checks what
// it can see (ranks, shapes, dtypes, devices, aliasing); the index values are checked on the
// device, before anything is written, in the checked mode (Options::check_indices, one sync),
// and otherwise trusted. Without the checked mode the call reads nothing back to the host and
// allocates only stream-ordered scratch on options.cuda_stream, so it can be captured in a
// CUDA graph. cache_seqlens is required with k_new on CUDA, and max_seqlen_q with cu_seqlens_q.
void forward_kvcache(const TensorRef& q, const KvCache& cache, const TensorRef& out, const TensorRef* lse,
                     const Options& options = {});

}  // namespace tileattn
