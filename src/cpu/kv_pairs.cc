// kv_pairs.cc: bf16 K and V packed as the bf16 GEMMs' words (kv_pairs.h).
#include "cpu/kv_pairs.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "common/seqlens.h"

namespace tileattn::detail::cpu {

bool k_words_in_place(const AttnParams& p) {
  return p.dtype == DType::kBFloat16 && p.k_stride.d == 1 && p.k_stride.l % 2 == 0 && p.k_stride.b % 2 == 0 &&
         p.k_stride.h % 2 == 0 && p.page_table == nullptr && reinterpret_cast<uintptr_t>(p.k) % 4 == 0;
}

bool pack_kv_pairs(const AttnParams& p, const SimdKernels& simd, int64_t b, int64_t pos0, int64_t kn,
                   int64_t hk, int64_t Dp, uint32_t* kw, uint32_t* vw, uint16_t* row16) {
  const int64_t D = p.head_dim, D2 = D / 2, sk = p.k_stride.d, sv = p.v_stride.d;
  for (int64_t j = 0; j < kn && kw; ++j) {
    const char* k = element_ptr(p.k, p.dtype, kv_offset(p, p.k_stride, b, pos0 + j, hk));
    uint32_t* row = kw + j * D2;
    if (sk == 1)
      std::memcpy(row, k, D2 * 4);
    else
      for (int64_t x = 0; x < D2; ++x)
        row[x] = bf16_at(k, 2 * x, sk) | uint32_t{bf16_at(k, 2 * x + 1, sk)} << 16;
  }
  const auto v_row = [&](int64_t j, uint16_t* buf) {  // V's row j, gathered first when strided
    const char* v = element_ptr(p.v, p.dtype, kv_offset(p, p.v_stride, b, pos0 + j, hk));
    if (sv == 1) return reinterpret_cast<const uint16_t*>(v);
    for (int64_t d = 0; d < D; ++d) buf[d] = bf16_at(v, d, sv);
    return static_cast<const uint16_t*>(buf);
  };
  bool finite = true;
  for (int64_t j = 0; j < kn; j += 2) {
    uint32_t* pair = vw + j / 2 * Dp;
    const uint16_t* second = j + 1 < kn ? v_row(j + 1, row16 + D) : nullptr;
    finite &= simd.interleave_bf16(v_row(j, row16), second, D, pair);
    std::fill(pair + D, pair + Dp, 0u);
  }
  return finite;
}

namespace {

std::atomic<int64_t> max_bytes{PackedKv::kMaxBytes};
std::atomic<int64_t> kept_total{0};  // bytes kept by all threads (PackedKv::kKeptTotal)

// Raw storage on a 64-byte boundary (no element objects: the packing creates them as it
// writes); null when the memory cannot be had.
void* allocate(int64_t bytes) {
  return ::operator new (static_cast<size_t>(bytes), std::align_val_t{64}, std::nothrow);
}
void release(void* p) { ::operator delete (p, std::align_val_t{64}); }

// A thread's kept storage, grown as needed, and whether a PackedKv of this thread holds it.
struct Kept {
  void* p = nullptr;
  int64_t bytes = 0;
  bool in_use = false;
  ~Kept() { drop(); }
  void drop() {
    release(p);
    kept_total -= bytes;
    p = nullptr, bytes = 0;
  }
  // Storage of n bytes, or null where this thread's or all threads' keeping would pass its cap.
  void* get(int64_t n) {
    if (in_use || n > PackedKv::kKeptBytes) return nullptr;
    if (n <= bytes) return p;
    drop();
    if (kept_total.fetch_add(n) + n > PackedKv::kKeptTotal) {
      kept_total -= n;
      return nullptr;
    }
    p = allocate(n);
    if (p == nullptr) kept_total -= n;
    bytes = p ? n : 0;
    return p;
  }
};

}  // namespace

int64_t PackedKv::set_max_bytes(int64_t bytes) { return max_bytes.exchange(bytes); }

PackedKv::~PackedKv() {
  release(own_);
  if (lent_) *lent_ = false;
}

PackedKv::PackedKv(const AttnParams& p, const SimdKernels& simd, int64_t block_k, int64_t Dp, int64_t reuse,
                   const std::vector<int64_t>& first, const std::vector<int64_t>& end, int threads)
    : first_(first), end_(end) {
  if (reuse < 2) return;
  const int64_t D = p.head_dim, heads = p.heads_kv;
  k_elems_ = block_k * (D / 2);
  v_elems_ = block_k / 2 * Dp;
  start_.resize(static_cast<size_t>(p.batch));
  int64_t slots = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    start_[b] = slots, slots += heads * std::max<int64_t>(0, end[b] - first[b]);
  const int64_t bytes = slots * (k_elems_ + v_elems_) * 4;
  if (slots == 0 || bytes > max_bytes.load()) return;
  finite_.assign(static_cast<size_t>(slots), 1);
  // (batch entry, KV head, block) of each slot, for the threads to share out.
  std::vector<int64_t> slot_b(static_cast<size_t>(slots));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t s = start_[b]; s < (b + 1 < p.batch ? start_[b + 1] : slots); ++s) slot_b[s] = b;
  thread_local Kept kept;
  void* storage = kept.get(bytes);
  if (storage) {
    kept.in_use = true, lent_ = &kept.in_use;
  } else if ((storage = own_ = allocate(bytes)) == nullptr) {
    return;  // no memory for a copy: the items pack their own blocks
  }
  k_ = static_cast<uint32_t*>(storage);
  v_ = k_ + slots * k_elems_;
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint16_t> row16(2 * D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t b = slot_b[s], n = end_[b] - first_[b], hk = (s - start_[b]) / n;
      const int64_t block = first_[b] + (s - start_[b]) % n;
      const SeqInfo seq = seq_info(p.seqs, b);
      const int64_t k0 = block * block_k, kn = std::min(block_k, seq.len_k - k0);
      if (kn <= 0) continue;  // past this sequence's keys: never read
      finite_[s] = pack_kv_pairs(p, simd, b, seq.k_start + k0, kn, hk, Dp, k_ + s * k_elems_,
                                 v_ + s * v_elems_, row16.data());
    }
  }
}

}  // namespace tileattn::detail::cpu
