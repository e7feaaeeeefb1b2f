// bwd_loader.cuh: the sm90 backward's loads (bwd_kernel.cuh): the producer's first warp issues
// K and V once and each step's Q, dO (TMA) and lse2 / dsum rows, and zeroes the rows of a block
// past a ragged sequence's end before the consumers see it.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/bwd_smem.cuh"
#include "cuda/sm90/tma.cuh"

namespace tileattn::detail::sm90 {

// Zeroes rows [from, rows) of a [chunks][rows][64] tile of 128-byte rows, 16 bytes a lane at a
// time (whole rows, so the swizzle within a row does not matter), then makes the zeros visible
// to the async proxy (wgmma's reads). All 32 lanes.
__device__ __forceinline__ void zero_tile_rows(uint8_t* tile, int rows, int from, int chunks, int lane) {
  const int units = (rows - from) * 8 * chunks;
  for (int idx = lane; idx < units; idx += 32) {
    const int row = from + idx / (8 * chunks), c = idx % (8 * chunks) / 8, u = idx % 8;
    *reinterpret_cast<uint4*>(tile + c * rows * 128 + row * 128 + 16 * u) = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async();
  __syncwarp();
}

// The producer's first warp: K and V once, then each step's Q and dO (lane 0, TMA) and its lse2
// / dsum rows (every lane kM / 32 of them or one more, 0 past the sequence: those columns are masked; loaded
// before the wait for the stage, stored after it) into the stage its consumers have released.
// qdo_full completes on lane 0's expected bytes and the 32 lanes' arrivals after their stores.
// A block that runs past a ragged sequence (BwdSeq) lands on its "landed" barrier instead; the
// warp waits for it, zeroes the rows past the sequence and arrives in the bytes' place (lane 0).
// K's rows past the keys matter (dQ = dS K multiplies them by 0), V's do not (dP^T's rows there
// are masked). Q's and dO's matter to dK and dV alike. A persistent CTA's later tiles (ring:
// dense batches only, so no ragged blocks) load K and V once the consumers have handed the last
// tile's back, after the first step's Q and dO (with two stages, theirs frees a step before the
// last tile ends).
template <class Smem>
__device__ __forceinline__ void bwd_loader(const Smem& sm, const BwdParams& p, const BwdSeq& seq,
                                           const BwdSteps& st, int k0, const CUtensorMap* tm_q,
                                           const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                                           const CUtensorMap* tm_do, const BwdRing& ring) {
  constexpr int kChunks = Smem::kDim / 64;
  const int lane = threadIdx.x % 32;
  constexpr int kN = Smem::kN;
  const bool ragged_k = seq.ragged_k && k0 + kN > seq.len_k;
  const auto load_kv = [&] {  // lane 0
    if (ring.tile > 0) mbarrier_wait(sm.kv_empty(), (ring.tile - 1) & 1);
    uint64_t* const bar = ragged_k ? sm.kv_landed() : sm.kv_full();
    mbarrier_arrive_expect_tx(bar, 2 * Smem::kKBytes);
    for (int c = 0; c < kChunks; ++c) {
      tma_load_4d(sm.k() + c * kN * 128, tm_k, bar, 64 * c, static_cast<int32_t>(st.hk), seq.k_start + k0,
                  seq.k_batch);
      tma_load_4d(sm.v() + c * kN * 128, tm_v, bar, 64 * c, static_cast<int32_t>(st.hk), seq.k_start + k0,
                  seq.k_batch);
    }
  };
  if (lane == 0) {
    tma_prefetch_descriptor(tm_q);
    tma_prefetch_descriptor(tm_do);
    if (ring.tile == 0) load_kv();
  }
  // After the first step's loads are on their way (or at once without steps).
  const auto ready_k = [&] {
    if (!ragged_k) return;
    mbarrier_wait(sm.kv_landed(), 0);
    zero_tile_rows(sm.k(), kN, seq.len_k - k0, kChunks, lane);
    if (lane == 0) mbarrier_arrive(sm.kv_full());
  };
  uint32_t landed_phase = 0;  // bit s: the parity of stage s's next "landed" wait
  for (int64_t i = 0; i < st.count; ++i) {
    const int64_t step = ring.step0 + i;  // the CTA's step
    const int stage = static_cast<int>(step % Smem::kStages);
    const int64_t h = st.head(i);
    const int32_t q0 = st.block(i) * Smem::kM;
    const bool ragged = seq.ragged_q && q0 + Smem::kM > seq.len_q;
    const int64_t w0 = st.b * p.w_sb + h * p.w_sh + seq.q_start + q0;
    constexpr int kPerLane = (Smem::kM + 31) / 32;  // 80 rows: the third's lanes 0-15
    float lse2[kPerLane], dsum[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int r = lane + 32 * j;
      const bool ok = r < Smem::kM && q0 + r < seq.len_q;
      lse2[j] = ok ? p.lse2[w0 + r] : 0.0f;
      dsum[j] = ok ? p.dsum[w0 + r] : 0.0f;
    }
    mbarrier_wait(sm.qdo_empty(stage), static_cast<uint32_t>(((step / Smem::kStages) & 1) ^ 1));
    uint64_t* const bar = ragged ? sm.qdo_landed(stage) : sm.qdo_full(stage);
    if (lane == 0) {
      mbarrier_arrive_expect_tx(bar, 2 * Smem::kQBytes);
      for (int c = 0; c < kChunks; ++c) {
        tma_load_4d(sm.q(stage) + c * Smem::kM * 128, tm_q, bar, 64 * c, static_cast<int32_t>(h),
                    seq.q_start + q0, seq.q_batch);
        tma_load_4d(sm.dout(stage) + c * Smem::kM * 128, tm_do, bar, 64 * c, static_cast<int32_t>(h),
                    seq.q_start + q0, seq.q_batch);
      }
      if (i == 0 && ring.tile > 0) load_kv();
    }
    float* dst = sm.rows(stage);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (lane + 32 * j >= Smem::kM) continue;
      dst[lane + 32 * j] = lse2[j];
      dst[Smem::kM + lane + 32 * j] = dsum[j];
    }
    if (ragged) {
      mbarrier_wait(bar, (landed_phase >> stage) & 1);
      landed_phase ^= 1u << stage;
      zero_tile_rows(sm.q(stage), Smem::kM, seq.len_q - q0, kChunks, lane);
      zero_tile_rows(sm.dout(stage), Smem::kM, seq.len_q - q0, kChunks, lane);
      if (lane == 0) mbarrier_arrive(sm.qdo_full(stage));
    }
    mbarrier_arrive(sm.qdo_full(stage));
    if (i == 0) ready_k();
  }
  if (st.count == 0 && ring.tile > 0 && lane == 0) load_kv();
  if (st.count == 0) ready_k();
}

}  // namespace tileattn::detail::sm90
