// params.h: the plain problem description the API layer validates once and hands to kernels.
#pragma once

#include <cstdint>

#include "common/mask.h"
#include "common/seqlens.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn::detail {

// Element strides of a [B, L, H, D] tensor.
struct Strides4 {
  int64_t b = 0, l = 0, h = 0, d = 1;
};

// Element strides of a [B, H, L] tensor (the LSE).
struct Strides3 {
  int64_t b = 0, h = 0, l = 1;
};

struct AttnParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  void* lse = nullptr;                // may be null
  DType dtype = DType::kFloat32;      // q, k, v
  DType out_dtype = DType::kFloat32;  // out (== dtype for forward())
  DType lse_dtype = DType::kFloat32;  // fp32 for forward()
  int device_index = 0;

  // seqlen_q / seqlen_k: the tensors' lengths, or for packed variable-length batches the longest
  // sequence's (seqs.max_q / max_k). A varlen q ([total_q, Hq, D]) has q_stride.b = 0 and its
  // rows start at seqs.cu_q[b]; its LSE [Hq, total_q] has lse_stride.b = 0 alike.
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  Strides4 q_stride, k_stride, v_stride, out_stride;
  Strides3 lse_stride;
  Seqs seqs;
  bool check_indices = false;  // Options::check_indices
  int num_splits = 0;          // Options::num_splits (0: the kernel's heuristic decides)

  float scale = 0.0f;    // resolved (never 0 unless the caller asked for 0)
  float softcap = 0.0f;  // 0 = off
  // Normalized mask: -1 = unbounded. causal is window_right = 0 (and left as given).
  int64_t window_left = -1, window_right = -1;

  // A KV cache's layout (forward_kvcache). With page_table, key/value position `pos` of sequence
  // b is slot pos % page_size of page page_table[b * page_table_stride + pos / page_size] (and
  // k_stride.b / v_stride.b are the page strides); else it is row pos of cache row kv_batch_idx[b]
  // (null: b). In the memory the kernel runs on (host for the CPU, device for CUDA). cache_rows
  // is the cache's dim 0 (pages, or cache rows), which sm90's TMA maps span.
  const int32_t* page_table = nullptr;
  int64_t page_size = 0, page_table_stride = 0, cache_rows = 0;
  const int32_t* kv_batch_idx = nullptr;

  Rescale rescale = Rescale::kConditional;
  int num_threads = 0;
  void* cuda_stream = nullptr;

  int64_t group_size() const { return heads_q / heads_kv; }  // query heads per kv head
  // Split-KV partial states are [S, part_batch, part_len, Hq, D] (LSE [S, part_batch, Hq,
  // part_len]): [S, B, Lq, ...] for a dense q, [S, 1, total_q, ...] for a varlen one.
  int64_t part_batch() const { return seqs.varlen_q() ? 1 : batch; }
  int64_t total_q = 0, total_k = 0;  // rows of a varlen q, k (0 for dense ones)
  int64_t part_len() const { return seqs.varlen_q() ? total_q : seqlen_q; }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // The window as a mask policy, bottom-right aligned (causal is window_right = 0).
  WindowMask window_mask() const {
    return WindowMask{seqlen_k, seqlen_k - seqlen_q, window_left, window_right};
  }
};

// A backward call: the forward's problem (q, k, v, out, lse and options as forward() took
// them) and the output gradient in, the input gradients out. Strides as the forward's.
struct BackwardParams {
  AttnParams fwd;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  Strides4 dout_stride, dq_stride, dk_stride, dv_stride;
  const void* dlse = nullptr;  // optional: shaped and strided like the forward's lse
  DType dlse_dtype = DType::kFloat32;
  Strides3 dlse_stride;
  DType grad_dtype = DType::kFloat32;  // dq, dk, dv (the oracle writes fp64)
  bool deterministic = false;
  Kernel kernel = Kernel::kAuto;  // Options::kernel: kCudaSm90 asks for the sm90 backward
};

// The element offset of key (or value, with its strides) position `pos` of sequence b, KV head
// hk, in a cache laid out as AttnParams describes it (host and device code alike).
TILEATTN_HD int64_t cache_offset(const int32_t* page_table, int64_t page_size, int64_t page_table_stride,
                                 const int32_t* kv_batch_idx, const Strides4& s, int64_t b, int64_t pos,
                                 int64_t hk) {
  if (page_table != nullptr) {
    const int64_t page = page_table[b * page_table_stride + pos / page_size];
    return page * s.b + (pos % page_size) * s.l + hk * s.h;
  }
  return (kv_batch_idx != nullptr ? kv_batch_idx[b] : b) * s.b + pos * s.l + hk * s.h;
}

inline int64_t kv_offset(const AttnParams& p, const Strides4& s, int64_t b, int64_t pos, int64_t hk) {
  return cache_offset(p.page_table, p.page_size, p.page_table_stride, p.kv_batch_idx, s, b, pos, hk);
}

// The address of element `offset` (in elements) of a buffer of the given dtype.
inline const char* element_ptr(const void* base, DType dtype, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace tileattn::detail
