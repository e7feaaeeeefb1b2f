// seqlens.h: where each sequence of a batch lives and how long it is (DESIGN.md section 6), the
// same for every kernel: dense batches, packed variable-length batches, used-length limits.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail {

// Pointers are in the memory the kernel runs on (host for the CPU, device for CUDA); null means
// "not given". Sequence b's query rows start at cu_q[b] (no cu_q: at 0 of batch entry b, which
// the batch stride reaches) and number cu_q[b + 1] - cu_q[b] (no cu_q: max_q); with used_q the
// first used_q[b] of them count. Keys alike.
struct Seqs {
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
  const int32_t* used_q = nullptr;
  const int32_t* used_k = nullptr;
  // KV cache left padding: sequence b's keys are positions [start_k[b], used_k[b]).
  const int32_t* start_k = nullptr;
  int64_t max_q = 0, max_k = 0;  // dense: the tensors' lengths; varlen: the longest sequence

  TILEATTN_HD bool ragged_k() const { return cu_k != nullptr || used_k != nullptr; }
  TILEATTN_HD bool varlen_q() const { return cu_q != nullptr; }
  TILEATTN_HD bool ragged_q() const { return cu_q != nullptr || used_q != nullptr; }
  // Whether any sequence may differ from the tensors' lengths (cu_seqlens or seqused given).
  TILEATTN_HD bool ragged() const { return ragged_q() || ragged_k(); }
};

// One sequence: its first row in q / out (k / v) and its lengths.
struct SeqInfo {
  int64_t q_start, k_start, len_q, len_k;
};

TILEATTN_HD SeqInfo seq_info(const Seqs& s, int64_t b) {
  SeqInfo info{0, 0, s.max_q, s.max_k};
  if (s.cu_q) {
    info.q_start = s.cu_q[b];
    info.len_q = s.cu_q[b + 1] - info.q_start;
  }
  if (s.cu_k) {
    info.k_start = s.cu_k[b];
    info.len_k = s.cu_k[b + 1] - info.k_start;
  }
  if (s.used_q) info.len_q = s.used_q[b];
  if (s.used_k) info.len_k = s.used_k[b];
  if (s.start_k) {
    info.k_start += s.start_k[b];
    info.len_k -= s.start_k[b];
  }
  return info;
}

// Split-KV: a tile's key blocks [n_begin, n_end) cut into `splits` runs of whole blocks, as even
// as blocks allow; split s gets [*begin, *end) (empty for the splits past the blocks).
TILEATTN_HD void split_blocks(int64_t n_begin, int64_t n_end, int splits, int split, int64_t* begin,
                              int64_t* end) {
  const int64_t blocks = n_end > n_begin ? n_end - n_begin : 0;
  const int64_t per = (blocks + splits - 1) / splits;
  const int64_t b0 = n_begin + per * split, b1 = b0 + per;
  *begin = b0 < n_end ? b0 : n_end;
  *end = b1 < n_end ? b1 : n_end;
}

}  // namespace tileattn::detail
