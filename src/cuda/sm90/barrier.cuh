// barrier.cuh: shared-memory addresses, mbarriers, named barriers and proxy fences (sm_90).
// Thin wrappers of single PTX instructions; tests/cuda_sm90/blocks_test.cu exercises them.
#pragma once

#include <cstdint>

namespace tileattn::detail::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// The dynamic shared memory's first 1024-byte boundary, as an offset from `raw` (pointer
// arithmetic, not an integer round trip: the compiler then knows every pointer derived from it
// is shared and emits LDS / STS rather than generic LD / ST, which wait on the long scoreboard).
__device__ __forceinline__ uint8_t* align_smem_1024(uint8_t* raw) {
  return raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
}

// One thread initializes; the fence plus a CTA barrier makes the init visible to every thread
// and to the copy engine.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals));
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrives and adds `bytes` to the transaction count the phase waits for (the TMA loads that
// complete on this barrier subtract them as they land).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// A wait that lasts 2^31 cycles (about a second) is a pipeline bug (a wrong parity, a lost
// arrival): with kTrap the kernel traps, so the launch fails with an error instead of hanging
// the GPU. A 32-bit clock keeps the check to one register. Consumer warpgroups wait without it:
// a trap in their code makes ptxas serialize the wgmmas and spill (measured with nvcc 13.0). A
// stuck consumer mostly leaves the producer stuck on "empty" too, and its wait traps; not when
// the producer has issued its last load already (a hang in a CTA's last block hangs).
inline constexpr uint32_t kHangCycles = 1u << 31;

// A wait that never ends: the kernel traps. Out of line: an inline trap where wgmma
// accumulators are live makes ptxas give up the registers setmaxnreg raised and serialize the
// wgmmas (ptxas -v; docs/kernels/sm90_backward.md, "Registers").
inline __device__ __noinline__ void hang_trap() { __trap(); }

// Waits until the phase with this parity has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once: producers start their ring at parity 1.
template <bool kTrap = true>
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  const uint32_t start = kTrap ? static_cast<uint32_t>(clock()) : 0u;
  do {
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "  selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    if (kTrap && !done && static_cast<uint32_t>(clock()) - start > kHangCycles) hang_trap();
  } while (!done);
}

// Named barriers 1..15 (0 is __syncthreads); `threads` is a multiple of 32.
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// named_sync that also ORs `pred` over the threads: every one gets the result (bar.red).
__device__ __forceinline__ bool named_sync_or(uint32_t id, uint32_t threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Shared memory written by ordinary stores (or cp.async) and read next by wgmma or the copy
// engine (the async proxy) needs this fence on the path from the writes to the reads: in each
// writing thread before the barrier, or, where the writes complete on an mbarrier by themselves
// (cp.async.mbarrier.arrive), in each reading thread after its wait (PTX memory model: a proxy
// fence anywhere in the causality order between the two).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace tileattn::detail::sm90
