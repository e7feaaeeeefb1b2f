// wgmma.cuh: shared-memory matrix descriptors and the wgmma ordering instructions (sm_90a).
// The instructions themselves are in wgmma_ops.cuh.
#pragma once

#include <cstdint>

#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/wgmma_ops.cuh"

namespace tileattn::detail::sm90 {

// Descriptor of a tile stored with the 128-byte swizzle (what TMA's SWIZZLE_128B writes), in
// 1024-byte aligned 8-row atoms of 128-byte rows. Fields (HOPPER_FACTS B2): start address,
// leading and stride byte offsets, all in 16-byte units; layout type 1 = 128-byte swizzle.
//   K-major operand (rows of 64 bf16 along K): sbo = 1024 (next 8 rows), lbo unused (16).
//   N-major operand (V as B of P V):            sbo = 1024 (next 8 k-rows), lbo = bytes between
//                                                64-column chunks of the tile.
__device__ __forceinline__ uint64_t make_smem_desc(const void* tile, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  desc |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return desc;
}

// Moves a descriptor's start address by `bytes` (a multiple of 16): the next k16 slice is
// +32 bytes along a K-major row, +2048 bytes (16 rows) down an N-major tile.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Before the first wgmma and whenever registers they read or write were touched by other code.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// stmatrix (a warp): four 8 x 8 16-bit matrices, register q holding matrix q in the accumulator
// fragment layout (lane t: row t / 4, columns 2 (t % 4) and + 1), memory row i of matrix q the
// 16 bytes at the address lane 8 q + i gives.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// stmatrix .trans (a warp): four 8 x 8 16-bit matrices, register q holding matrix q in the
// accumulator fragment layout (lane t: row t / 4, columns 2 (t % 4) and + 1, the lower column
// in the low half), each stored transposed: memory row i of matrix q, 16 bytes at the address
// lane 8 q + i gives, holds the matrix's column i (tests/cuda_sm90/blocks_test.cu checks it).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t smem, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Keeps the compiler from moving reads or writes of accumulators across a wgmma boundary.
template <int kCount>
__device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace tileattn::detail::sm90
