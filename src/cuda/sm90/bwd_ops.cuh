// bwd_ops.cuh: the pieces of the sm90 backward (bwd_kernel.cuh): its GEMMs on shared-memory
// tiles and register fragments, where a thread's accumulator elements sit, and the bulk dQ
// additions with the acquire / release of the deterministic order.
#pragma once

#include <cstdint>

#include "cuda/common/math.cuh"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_layout.h"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::detail::sm90 {

// Adds `bytes` of fp32 from shared memory into global memory (the L2 does the additions).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
// Waits until the committed bulk operations are complete (their global writes performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Raises a dQ order counter once this CTA's additions are complete (their writes performed).
__device__ __forceinline__ void release_turn(int* counter) {
  bulk_wait_all();
  fence_proxy_async_global();
  __threadfence();
  atomicAdd(counter, 1);
}

// The step's GEMM of two shared-memory tiles, m64 x kM, K = D: rows `a` (64 of a K-major tile
// of a_rows rows) times the kM rows of `b` (a K-major [D / 64][kM][64] tile) transposed.
template <int kD, int kM, bool kBf16>
__device__ __forceinline__ void gemm_rows(float* acc, const uint8_t* a, int a_rows, const uint8_t* b) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int c = kk / 4, within = 32 * (kk % 4);
    const uint64_t da = make_smem_desc(a + c * a_rows * 128 + within, 16, 1024);
    const uint64_t db = make_smem_desc(b + c * kM * 128 + within, 16, 1024);
    WgmmaOp<kM, kBf16>::template ss<0>(acc, da, db, kk > 0 ? 1u : 0u);
  }
  wgmma_commit();
}

// acc (64 keys x D) += frag (64 keys x kM rows, registers) times the step's [kM rows][D] tile.
template <int kD, int kM, bool kBf16>
__device__ __forceinline__ void gemm_frag(float* acc, const uint32_t (*frag)[4], const uint8_t* rows) {
#pragma unroll
  for (int kk = 0; kk < kM / 16; ++kk) {
    const uint64_t db = make_smem_desc(rows + 2048 * kk, kM * 128, 1024);
    WgmmaOp<kD, kBf16>::template rs<1>(acc, frag[kk], db, 1u);
  }
}

// An m64 x 16 kSteps accumulator tile as the A registers of a wgmma (two elements a register).
template <class T, int kSteps>
__device__ __forceinline__ void pack_frag(uint32_t (&frag)[kSteps][4], const float* x) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) frag[kk][r] = cuda::pack2<T>(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
}

}  // namespace tileattn::detail::sm90
