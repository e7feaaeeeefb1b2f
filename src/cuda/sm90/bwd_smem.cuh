// bwd_smem.cuh: the sm90 backward's shared memory, a CTA's sequence and its steps (the query
// blocks it visits), shared by the loader (bwd_loader.cuh) and the kernel (bwd_kernel.cuh).
#pragma once

#include <cstdint>

#include "common/seqlens.h"
#include "cuda/sm90/bwd.h"

namespace tileattn::detail::sm90 {

// Shared memory: K, V ([D / 64][kN keys][64], 128-byte swizzled as TMA writes them), kStages
// stages of Q and dO ([D / 64][kM rows][64]), dS ([kN / 64 key chunks][kM rows][64 keys],
// swizzled), at D = 256 the consumers' P^T handoff (bwd_pair.cuh), kDqBuffers buffers of dQ's fp32 staging
// (kM x D: the two consumers' parts, in the accumulators' order; one buffer at 80 rows), kStages stages of
// lse2 / dsum rows and the barriers; every tile on a 1024-byte boundary. D = 256 has one stage of Q and dO
// and one dQ buffer: two would need 280 KiB.
template <int kD, bool kWindow = true>
struct BwdSmem {
  static constexpr int kDim = kD;
  static constexpr int kM = bwd_block_m(kD, kWindow);  // query rows a step
  static constexpr int kN = bwd_block_n(kD);           // the CTA's keys
  static constexpr bool kDqT = bwd_dq_transposed(kM);  // dQ^T = K^T dS^T (bwd_kernel.cuh)
  // Two dQ buffers at 80 rows would need 244 KiB; the addition of one reads it during the next
  // step's first GEMMs.
  static constexpr int kStages = kD == 256 ? 1 : 2, kDqBuffers = kD == 256 || kDqT ? 1 : 2;
  static constexpr int kKBytes = kN * kD * 2, kQBytes = kM * kD * 2;
  static constexpr int kDsBytes = kM * kN * 2, kDqBytes = kM * kD * 4;
  static constexpr int kXchBytes = kD == 256 ? kN * kM * 4 : 0;  // P^T in fp32
  static constexpr int kRowsBytes = 2 * kM * 4;                  // a stage's lse2 and dsum rows
  static constexpr int kBytes = 1024 + 2 * kKBytes + 2 * kStages * kQBytes + kDsBytes + kXchBytes +
                                kDqBuffers * kDqBytes + kStages * kRowsBytes + 1024;
  static_assert(kBytes <= 227 * 1024, "within a CTA's shared memory");
  uint8_t* base;
  __device__ uint8_t* k() const { return base; }
  __device__ uint8_t* v() const { return base + kKBytes; }
  __device__ uint8_t* q(int stage) const { return base + 2 * kKBytes + stage * 2 * kQBytes; }
  __device__ uint8_t* dout(int stage) const { return q(stage) + kQBytes; }
  __device__ uint8_t* ds() const { return base + 2 * kKBytes + 2 * kStages * kQBytes; }
  __device__ float* xch() const { return reinterpret_cast<float*>(ds() + kDsBytes); }
  __device__ float* dq(int buf) const {
    return reinterpret_cast<float*>(ds() + kDsBytes + kXchBytes + buf * kDqBytes);
  }
  // Stage s's lse2 (kM floats), then its dsum.
  __device__ float* rows(int stage) const {
    return reinterpret_cast<float*>(ds() + kDsBytes + kXchBytes + kDqBuffers * kDqBytes + stage * kRowsBytes);
  }
  __device__ uint64_t* barriers() const {
    return reinterpret_cast<uint64_t*>(ds() + kDsBytes + kXchBytes + kDqBuffers * kDqBytes +
                                       kStages * kRowsBytes);
  }
  // [0] K and V ready; stage s's Q, dO and rows ready / read by every consumer; dQ staging
  // buffer s written by both consumers / read by its bulk addition. Where rows past the
  // sequence must be zeroed (bwd_loader.cuh), TMA completes on the "landed" barriers instead and
  // the loader readies the buffers once it has zeroed them.
  __device__ uint64_t* kv_full() const { return barriers(); }
  __device__ uint64_t* qdo_full(int s) const { return barriers() + 1 + s; }
  __device__ uint64_t* qdo_empty(int s) const { return barriers() + 3 + s; }
  __device__ uint64_t* dq_full(int s) const { return barriers() + 5 + s; }
  __device__ uint64_t* dq_empty(int s) const { return barriers() + 7 + s; }
  __device__ uint64_t* kv_landed() const { return barriers() + 9; }
  __device__ uint64_t* qdo_landed(int s) const { return barriers() + 10 + s; }
  // Persistent CTAs: K and V read by every consumer, so the next tile's may be loaded.
  __device__ uint64_t* kv_empty() const { return barriers() + 12; }
};
static_assert(BwdSmem<64>::kN == 2 * 64 && BwdSmem<128>::kN == 2 * 64 && BwdSmem<256>::kN == 64,
              "two consumer warpgroups of 64 keys, or one block of 64 keys both share (D = 256)");
static_assert(BwdSmem<64>::kM * 64 == 2 * 64 * 64 && BwdSmem<128>::kM * 128 == 2 * 64 * 64 &&
                  BwdSmem<128, false>::kM * 128 == 2 * 64 * 80 && BwdSmem<256>::kM * 256 == 4 * 64 * 64,
              "a step's dQ tile is 64 x 64 parts, one or two a consumer, or 64 x 80 (bwd_layout.h)");

// A CTA's sequence: where its rows start in q / dout and k / v (the TMA maps' row coordinates),
// the maps' batch coordinates (0 in a packed varlen tensor) and the lengths. ragged_q / ragged_k:
// the storage goes on past the sequence's rows (packed or seqused), so the loader zeroes the
// rows of a block past them (their values may be another sequence's, or NaN past seqused, and
// masked scores only make their weights 0: 0 x NaN is NaN). Dense batches end at the tensors'
// ends, which TMA fills with zeros.
struct BwdSeq {
  int32_t q_start, k_start, len_q, len_k, q_batch, k_batch;
  bool ragged_q, ragged_k;
};
template <bool kVarlen>
__device__ __forceinline__ BwdSeq bwd_seq(const cuda::KernelParams& f, int64_t b) {
  const int32_t b32 = static_cast<int32_t>(b);
  if constexpr (!kVarlen) {
    return BwdSeq{0,     0,    static_cast<int32_t>(f.seqlen_q), static_cast<int32_t>(f.seqlen_k), b32, b32,
                  false, false};
  } else {
    const SeqInfo s = seq_info(f.seqs, b);
    return BwdSeq{static_cast<int32_t>(s.q_start),
                  static_cast<int32_t>(s.k_start),
                  static_cast<int32_t>(s.len_q),
                  static_cast<int32_t>(s.len_k),
                  f.seqs.cu_q ? 0 : b32,
                  f.seqs.cu_k ? 0 : b32,
                  f.seqs.ragged_q(),
                  f.seqs.ragged_k()};
  }
}

// Where a tile sits in its CTA's rings (persistent CTAs, bwd_kernel.cuh): the steps of the CTA's
// earlier tiles (the Q / dO stages and dQ buffers count on across tiles), how many tiles came
// before (K and V's phase) and whether another follows (the consumers then hand K and V back).
// A CTA of one tile: all zero.
struct BwdRing {
  int64_t step0 = 0;
  uint32_t tile = 0;
  bool more = false;
};

// A CTA's steps: step i is query head hk group + i / m_count and query block m_begin + i %
// m_count (every query head of the KV head's group, every query block that sees the keys).
struct BwdSteps {
  int64_t b, hk, group, count;
  int m_begin, m_count;
  __device__ int64_t head(int64_t i) const { return hk * group + i / m_count; }
  __device__ int block(int64_t i) const { return m_begin + static_cast<int>(i % m_count); }
};

}  // namespace tileattn::detail::sm90
