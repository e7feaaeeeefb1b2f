// gather.cuh: a paged KV cache's key block gathered row by row with cp.async into the layout a
// TMA box with the 128-byte swizzle writes ([D / 64][block_n rows][64], 16-byte unit u of row r
// at u ^ (r % 8)), for page sizes TMA boxes do not fit (page_box 0) and paged caches with left
// padding. The producer warp issues a block as one cp.async group; the block's "full" barrier
// is arrived once the group landed and was fenced for the async proxy (wgmma reads it), which
// the warp does one load later (Gather::issue) or at the end of the tile (Gather::flush).
// VWarps: a contiguous cache's V blocks by cp.async from the producer warpgroup's other warps.
#pragma once

#include <cstdint>

#include "cuda/common/kernel_params.h"
#include "cuda/sm90/barrier.cuh"

namespace tileattn::detail::sm90 {

__device__ __forceinline__ void cp_async_16_zfill(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The producer warp's gathers, with the one block whose barrier is still to be arrived.
template <int kHeadDim, int kBlockN>
struct Gather {
  static constexpr int kUnits = kHeadDim / 8;  // 16-byte units of a row
  static constexpr int kRowsPerPass = 32 / kUnits;
  uint64_t* pending = nullptr;

  // Rows [key, key + kBlockN) of sequence b's keys (absolute positions: left padding
  // included) into dst; positions at or past `end` are zero-filled and read nothing.
  __device__ void issue(uint8_t* dst, const uint8_t* base, int64_t sb, int64_t sl, int64_t sh, int32_t hk,
                        const int32_t* pages, int page_size, int32_t key, int32_t end, uint64_t* full,
                        int lane) {
    const int u = lane % kUnits, row = lane / kUnits;
#pragma unroll 4
    for (int r = row; r < kBlockN; r += kRowsPerPass) {
      const int32_t pos = key + r;
      const bool ok = pos < end;
      const int64_t elem = ok ? pages[pos / page_size] * sb + (pos % page_size) * sl + hk * sh + 8 * u : 0;
      cp_async_16_zfill(dst + (u / 8) * kBlockN * 128 + r * 128 + (((u % 8) ^ (r % 8)) << 4), base + 2 * elem,
                        ok);
    }
    cp_async_commit_group();
    complete<1>(lane);  // the block before this one
    pending = full;
  }
  // The pending block's barrier, once at most kLeft groups (this thread's newest) are in flight.
  template <int kLeft>
  __device__ void complete(int lane) {
    if (pending == nullptr) return;
    cp_async_wait_group<kLeft>();
    fence_proxy_async();  // every lane's rows, visible to wgmma's reads
    __syncwarp();
    if (lane == 0) mbarrier_arrive(pending);
    pending = nullptr;
  }
  __device__ void flush(int lane) { complete<0>(lane); }
};

// A serving kernel's V blocks from a contiguous cache, loaded by cp.async from warps 1-3 of the
// producer warpgroup while warp 0 issues Q and K by TMA: a second engine beside the SM's TMA
// unit (tests/cuda_sm90/stream_probe: TMA alone streams a decode's K and V at ~4.1 TB/s, K by
// TMA and V this way at ~4.35). Each thread copies 16-byte units into TMA's swizzled layout and
// arrives on the stage's "full" barrier once its copies land (cp.async.mbarrier.arrive.noinc:
// the barrier counts kThreads arrivals); keys at or past the sequence's end are zero-filled,
// so a ragged last block needs no zeroing pass. The consumers fence the async proxy after the
// wait, before wgmma reads the stage.
struct VWarps {
  static constexpr int kThreads = 96;
  __device__ static void arrive_on(uint64_t* full) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(full)) : "memory");
  }
  // Rows [key, key + kBlockN) of base (batch and head applied; sl: the row stride in elements)
  // into dst, rows at or past `end` zeroed; t in [0, kThreads).
  template <int kHeadDim, int kBlockN>
  __device__ static void issue(uint8_t* dst, const uint8_t* base, int64_t sl, int32_t key, int32_t end,
                               uint64_t* full, int t) {
    constexpr int kUnits = kHeadDim / 8;
#pragma unroll 4
    for (int idx = t; idx < kBlockN * kUnits; idx += kThreads) {
      const int r = idx / kUnits, u = idx % kUnits;
      const bool ok = key + r < end;
      cp_async_16_zfill(dst + (u / 8) * kBlockN * 128 + r * 128 + (((u % 8) ^ (r % 8)) << 4),
                        base + 2 * (ok ? (key + r) * sl + 8 * u : 0), ok);
    }
    arrive_on(full);
  }
  __device__ static void drain() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
};

}  // namespace tileattn::detail::sm90
