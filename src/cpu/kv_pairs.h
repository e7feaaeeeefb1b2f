// kv_pairs.h: bf16 K and V as the bf16 GEMMs' words (simd.h gemm_bf16), for the CPU forward on
// AMX: K's rows as words of two bf16 along d (the A operand of S^T = K Q^T), V's pairs of rows
// interleaved (the B operand of O += P V). Per key block inside a work item, or for the whole
// problem once before the items (PackedKv) where many items would pack the same blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "common/aligned.h"
#include "common/params.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {

// bf16 element x of a row at `stride` elements.
inline uint16_t bf16_at(const void* row, int64_t x, int64_t stride) {
  return static_cast<const uint16_t*>(row)[x * stride];
}

// Whether K's rows can be the bf16 GEMM's A operand where they lie (words of two bf16 at a
// uniform stride): unit head_dim stride, even strides, no page table, 4-byte aligned rows.
bool k_words_in_place(const AttnParams& p);

// Keys [pos0, pos0 + kn) (positions in K / V's rows) of KV head hk of batch entry b: K's rows
// into kw [kn][D / 2] (unless kw is null), V's pairs of rows into vw [(kn + 1) / 2][Dp] (columns
// past D and the pair of an odd last row zero). row16 holds 2 D elements. Returns whether every
// value of V is finite.
bool pack_kv_pairs(const AttnParams& p, const SimdKernels& simd, int64_t b, int64_t pos0, int64_t kn,
                   int64_t hk, int64_t Dp, uint32_t* kw, uint32_t* vw, uint16_t* row16);

// Every (batch entry, KV head, key block of block_k) packed once, block_k even, for the
// forward's items to read instead of K and V: contiguous rows (rows of one head in K itself lie
// H x D apart, out of reach of the hardware's stream prefetch), each block packed once instead
// of once for every query tile and query head of its group: K [block_k][D / 2] words, V's pairs
// of rows [block_k / 2][Dp], and whether V is finite.
class PackedKv {
 public:
  // Packs, for each batch entry b, its key blocks [first[b], end[b]) (the blocks its query rows
  // read under the mask), when the items would pack each block `reuse` >= 2 times, the copy fits
  // in max_bytes (kMaxBytes) and its storage can be had; empty() otherwise (the items then pack
  // their own blocks). Either way the GEMMs read the same values: results are the same bits.
  PackedKv(const AttnParams& p, const SimdKernels& simd, int64_t block_k, int64_t Dp, int64_t reuse,
           const std::vector<int64_t>& first, const std::vector<int64_t>& end, int threads);
  ~PackedKv();
  PackedKv(const PackedKv&) = delete;
  PackedKv& operator=(const PackedKv&) = delete;
  static constexpr int64_t kMaxBytes = int64_t{1} << 30;
  // Tests: a copy is made only up to `bytes` (0: never; kMaxBytes by default). Returns the last.
  static int64_t set_max_bytes(int64_t bytes);
  // Storage up to kKeptBytes is kept by the calling thread for its next call, while all threads
  // together keep at most kKeptTotal: fresh pages fault and are zeroed by the kernel on first
  // touch, which cost the bf16 causal forward at L = 2048 (32 MiB of K and V) 1.2x of its time
  // on a Xeon with AMX.
  static constexpr int64_t kKeptBytes = int64_t{64} << 20, kKeptTotal = int64_t{256} << 20;
  bool empty() const { return k_ == nullptr; }
  // Block `block` (of the key grid) of KV head hk of batch entry b, one of its packed blocks.
  const uint32_t* k(int64_t b, int64_t hk, int64_t block) const { return k_ + slot(b, hk, block) * k_elems_; }
  const uint32_t* v(int64_t b, int64_t hk, int64_t block) const { return v_ + slot(b, hk, block) * v_elems_; }
  bool v_finite(int64_t b, int64_t hk, int64_t block) const { return finite_[slot(b, hk, block)] != 0; }

 private:
  // Batch entry b's slots start at start_[b], KV head major, its blocks from first_[b] on.
  int64_t slot(int64_t b, int64_t hk, int64_t block) const {
    return start_[b] + hk * (end_[b] - first_[b]) + block - first_[b];
  }
  int64_t k_elems_ = 0, v_elems_ = 0;  // 4-byte elements a block
  std::vector<int64_t> first_, end_, start_;
  uint32_t *k_ = nullptr, *v_ = nullptr;  // K's blocks, then V's; every word the GEMMs read is written
  void* own_ = nullptr;                   // storage of this call alone (else the thread's kept storage)
  bool* lent_ = nullptr;                  // the kept storage's in-use flag, while this holds it
  std::vector<uint8_t> finite_;
};

}  // namespace tileattn::detail::cpu
