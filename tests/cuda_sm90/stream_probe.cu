// stream_probe: how fast TMA streams a decode's K and V on this GPU with no attention in the
// way. The sm90 split decode reads 3.5-3.6 TB/s at 1 x 128k and 8 x 16k and 4.1 at 8 x 128k,
// where cuDNN reads 3.9 and 4.4 (docs/kernels/sm90_serving.md). Each variant here is a producer warp
// issuing the loads of a fixed run of key blocks a CTA (as the split decode does) into a ring,
// and a consumer warp that releases each stage once it landed (after `spin_ns`, standing in
// for the GEMMs). The variants change one thing at a time against the kernel's pattern:
// - the box: per 64-column half of one head (the kernel's, 128 bytes of each 2 KiB key row),
//   or one box over whole rows of the CTA's heads (256 bytes a head, contiguous);
// - KV heads a CTA streams together (1, 2, 8: 2 KiB a row with all 8);
// - keys a block and the ring's depth (bytes in flight);
// - CTAs an SM (1, or 2 with half the ring each and twice the splits);
// - boxes of 16 keys, as a cache paged by 16 is loaded (contiguous here: the box size alone);
// - the engine: V by cp.async from four warps (16 bytes a thread), K by TMA;
// - the split: runs of one (batch, head) on tiles x splits CTAs (the kernel's: 128 of the 132
//   SMs at these shapes), or an equal share of all blocks on every SM (across runs);
// - a paged cache: pages of 16 keys in a random order (a block's 8 boxes from 8 pages far
//   apart), with or without an L2 prefetch (TMA's, no shared memory) of the blocks 2 ahead;
// - more warps polling each stage's barrier before the release (the kernel's consumers: 8).
// A plain vectorized read of the same bytes is the ceiling. K and V are hashed values (never
// zeros); each launch follows a 256 MiB read (normal-priority loads) that evicts them from L2
// with clean lines. Prints
// GB/s of K and V (median of 15 launches) per variant and shape. Built with
// -DTILEATTN_SM90_TUNE=ON.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/tensor_map.h"
#include "cuda/sm90/tma.cuh"
#include "fill.h"

namespace {
using namespace tileattn::detail::sm90;

constexpr int kD = 128, kMaxStages = 8, kLoaders = 128;

// Fetches the box at coordinates (c0 innermost, ...) into L2 only (no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_l2_4d(const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                                   int32_t c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

struct Variant {
  const char* name;
  int rows, stages, heads;  // keys a block, ring depth, KV heads a CTA
  bool wide;                // one box over whole rows of the heads, else one a 64-column half
  int ctas_per_sm;          // 1: shared memory padded so that no second CTA fits
  int spin_ns;              // the consumer's time on a block before it releases the stage
  int box_rows = 0;         // keys a box (a paged cache's page), 0: the block's
  bool flat = false;        // every CTA an equal share of all blocks, across (batch, head) runs
  bool mixed = false;       // K by TMA, V by cp.async from four more warps (one head, half boxes)
  bool paged = false;       // boxes of 16 keys from pages of 16 in a random order
  int prefetch = 0;         // paged: blocks ahead whose boxes are prefetched into L2 (0: none)
  int pollers = 0;          // extra warps that wait on each stage and release it too
};

struct Job {
  int32_t len, groups, splits, blocks, rows, heads, stages, box_rows, units, kv_heads;
  const uint8_t* v;      // mixed: V's base for cp.async
  bool mixed;            // V by cp.async from four warps, K by TMA
  bool flat;             // an equal share of all blocks a CTA (one CTA per SM x ctas_per_sm), splits unused
  int64_t spin_cycles;   // spin_ns at the SM's clock
  uint32_t stage_bytes;  // K (or V) bytes of one stage
  const int32_t* table;  // paged: logical page (batch x len / 16 + key / 16) -> physical page
  int prefetch, pollers;
};

// Box coordinates of keys [key, key + box_rows) of `batch`: (key, batch) in a contiguous cache,
// (0, page) in a paged one.
__device__ __forceinline__ void box_at(const Job& job, int32_t batch, int32_t key, int32_t* c2, int32_t* c3) {
  if (job.table == nullptr) {
    *c2 = key, *c3 = batch;
  } else {
    *c2 = 0, *c3 = job.table[(int64_t{batch} * job.len + key) / 16];
  }
}

// CTA = (batch, head group, split); warp 0 loads (lane 0 alone unless the boxes are smaller
// than a block: then a lane a box, as the kernel loads a paged cache), warp 1 releases. Mixed:
// warp 0 loads K alone, and warps 2-5 load V by cp.async (16 bytes a thread and instruction,
// into the swizzled layout TMA writes), each thread's copies arriving on the stage's barrier.
template <bool kWide>
__global__ void __launch_bounds__(384) stream_kv(const __grid_constant__ CUtensorMap tm_k,
                                                 const __grid_constant__ CUtensorMap tm_v, const Job job) {
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  extern __shared__ uint8_t raw[];
  uint8_t* const ring = align_smem_1024(raw);
  // The CTA's key blocks in the flattened (batch, head group, block) order: a split of one
  // (batch, head group), or (flat) an equal share of all of them, across their boundaries.
  int64_t g0, g1;
  if (job.flat) {
    const int64_t total = int64_t{job.units} * job.blocks;
    g0 = total * blockIdx.x / gridDim.x, g1 = total * (blockIdx.x + 1) / gridDim.x;
  } else {
    const int64_t unit = blockIdx.x / job.splits, split = blockIdx.x % job.splits;
    g0 = unit * job.blocks + split * job.blocks / job.splits;
    g1 = unit * job.blocks + (split + 1) * job.blocks / job.splits;
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < job.stages; ++s)
      mbarrier_init(&full[s], job.mixed ? 1 + kLoaders : 1), mbarrier_init(&empty[s], 1 + job.pollers);
    fence_barrier_init();
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = 0; j < g1 - g0; ++j) {
    const int s = j % job.stages;
    const uint32_t phase = (j / job.stages) & 1;
    if (warp == 0) {  // lane 0 arms the stage; lane i issues the boxes of keys i x box_rows on
      if (lane == 0) {
        mbarrier_wait(&empty[s], phase ^ 1);
        mbarrier_arrive_expect_tx(&full[s], (job.mixed ? 1 : 2) * job.stage_bytes);
      }
      __syncwarp();
      uint8_t* const k = ring + s * 2 * job.stage_bytes;
      uint8_t* const v = k + job.stage_bytes;
      const int64_t unit = (g0 + j) / job.blocks;
      const int32_t key = static_cast<int32_t>((g0 + j) % job.blocks) * job.rows,
                    head = static_cast<int32_t>(unit % job.groups) * job.heads,
                    batch = static_cast<int32_t>(unit / job.groups), r = lane * job.box_rows;
      if (r < job.rows) {
        if constexpr (kWide) {
          const uint32_t at = r * job.heads * kD * 2;
          tma_load_5d(k + at, &tm_k, &full[s], 0, 0, head, key + r, batch);
          tma_load_5d(v + at, &tm_v, &full[s], 0, 0, head, key + r, batch);
        } else {
          int32_t c2, c3;
          box_at(job, batch, key + r, &c2, &c3);
          for (int h = 0; h < job.heads; ++h)
            for (int c = 0; c < 2; ++c) {
              const uint32_t at = ((2 * h + c) * job.rows + r) * 128;
              tma_load_4d(k + at, &tm_k, &full[s], 64 * c, head + h, c2, c3);
              if (!job.mixed) tma_load_4d(v + at, &tm_v, &full[s], 64 * c, head + h, c2, c3);
            }
          if (job.prefetch > 0 && j + job.prefetch < g1 - g0) {  // one head, one run (paged only)
            const int64_t ahead = g0 + j + job.prefetch;
            const int32_t key2 = static_cast<int32_t>(ahead % job.blocks) * job.rows;
            box_at(job, static_cast<int32_t>(ahead / job.blocks / job.groups), key2 + r, &c2, &c3);
            for (int c = 0; c < 2; ++c) {
              tma_prefetch_l2_4d(&tm_k, 64 * c, head, c2, c3);
              tma_prefetch_l2_4d(&tm_v, 64 * c, head, c2, c3);
            }
          }
        }
      }
    } else if (warp >= 2 && !job.mixed) {  // pollers: wait for the stage, then release it too
      mbarrier_wait(&full[s], phase);
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&empty[s]);
    } else if (warp >= 2) {  // mixed: V by cp.async
      const int t = threadIdx.x - 64;
      mbarrier_wait(&empty[s], phase ^ 1);
      uint8_t* const v = ring + s * 2 * job.stage_bytes + job.stage_bytes;
      const int64_t unit = (g0 + j) / job.blocks, key = (g0 + j) % job.blocks * job.rows;
      const uint8_t* const src =
          job.v + ((unit / job.groups * job.len + key) * job.kv_heads + unit % job.groups) * kD * 2;
      for (int idx = t; idx < job.rows * 16; idx += kLoaders) {
        const int r = idx / 16, u = idx % 16;
        cp_async_16(v + (u / 8) * job.rows * 128 + r * 128 + (((u % 8) ^ (r % 8)) << 4),
                    src + int64_t{r} * job.kv_heads * kD * 2 + 16 * u);
      }
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(&full[s]))
                   : "memory");
    } else if (warp == 1) {
      mbarrier_wait(&full[s], phase);
      if (job.spin_cycles > 0 && lane == 0)
        for (const int64_t t0 = clock64(); clock64() - t0 < job.spin_cycles;) {
        }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&empty[s]);
    }
  }
  if (warp >= 2) asm volatile("cp.async.wait_all;" ::: "memory");  // no copy outlives its thread
}

// Every byte of a and b read once, 16 at a time; the sink keeps the loads. kFlush: plain
// loads (ld.global.cg, normal priority, so the lines evict K and V from L2), else streaming
// ones (the plain read's ceiling).
template <bool kFlush>
__global__ void read_all(const uint4* a, const uint4* b, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 x = kFlush ? __ldcg(a + i) : __ldcs(a + i), y = kFlush ? __ldcg(b + i) : __ldcs(b + i);
    acc ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

#define CHECK(call)                                                               \
  do {                                                                            \
    const cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("%s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

struct Buffers {
  void *k, *v, *flush;
  unsigned* sink;
  int64_t flush_n;  // uint4 elements
  int sms, clock_khz;
  int32_t* table = nullptr;  // the paged variants' page table, for table_pages pages
  int64_t table_pages = 0;
};

// Median microseconds of `launch` over 15 timed calls, each after the L2 flush.
template <class F>
double median_us(const Buffers& buf, F&& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 18; ++i) {
    const uint4* const flush = static_cast<const uint4*>(buf.flush);
    read_all<true><<<buf.sms * 4, 512>>>(flush, flush + buf.flush_n / 2, buf.flush_n / 2, buf.sink);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 3) ms.push_back(t);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

// A random permutation of `pages` pages (fixed seed) on the device, for the paged variants.
const int32_t* page_table(Buffers& buf, int64_t pages) {
  if (buf.table_pages != pages) {
    std::vector<int32_t> perm(static_cast<size_t>(pages));
    for (int64_t i = 0; i < pages; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
    if (buf.table) CHECK(cudaFree(buf.table));
    CHECK(cudaMalloc(&buf.table, perm.size() * sizeof(int32_t)));
    CHECK(cudaMemcpy(buf.table, perm.data(), perm.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    buf.table_pages = pages;
  }
  return buf.table;
}

// One variant on [B, L, 8, 128] K and V: its maps, split count (the CTAs fill ctas_per_sm x
// SMs, at least two blocks a split, as dispatch/splits.h keeps) and launch.
double run_variant(Buffers& buf, const Variant& var, int64_t B, int64_t L, int* ctas_out) {
  const int64_t H = 8, row = H * kD * 2, batch = L * row;
  const int groups = static_cast<int>(H / var.heads);
  const int blocks = static_cast<int>((L + var.rows - 1) / var.rows);
  const int64_t units = B * groups;
  const int fill = static_cast<int>(std::max<int64_t>(1, var.ctas_per_sm * buf.sms / units));
  const int splits = std::max(1, std::min(fill, blocks / 2));
  const int box_rows = var.box_rows > 0 ? var.box_rows : var.rows;
  if (var.rows % box_rows != 0 || var.rows / box_rows > 32 || var.stages > kMaxStages || H % var.heads != 0 ||
      (var.mixed && (var.heads != 1 || var.wide || box_rows != var.rows || var.pollers > 0)) ||
      (var.paged &&
       (var.heads != 1 || var.wide || box_rows != 16 || var.mixed || var.flat || L % var.rows != 0)) ||
      (var.prefetch > 0 && !var.paged)) {
    std::printf("%s: rows %d, box rows %d, stages %d, heads %d do not fit the probe\n", var.name, var.rows,
                box_rows, var.stages, var.heads);
    std::exit(1);
  }
  Job job{};
  job.len = static_cast<int32_t>(L), job.groups = groups, job.splits = splits, job.blocks = blocks;
  job.rows = var.rows, job.heads = var.heads, job.stages = var.stages;
  job.spin_cycles = int64_t{var.spin_ns} * buf.clock_khz / 1000000;
  job.box_rows = box_rows, job.stage_bytes = static_cast<uint32_t>(var.heads * var.rows * kD * 2);
  CUtensorMap tk, tv;
  if (var.wide) {
    // (64 columns, 2 halves, heads, keys, batch): whole rows of `heads` heads in one box.
    const uint64_t dims[5] = {64, 2, static_cast<uint64_t>(H), static_cast<uint64_t>(L),
                              static_cast<uint64_t>(B)};
    const uint64_t strides[4] = {128, kD * 2, static_cast<uint64_t>(row), static_cast<uint64_t>(batch)};
    const uint32_t box[5] = {64, 2, static_cast<uint32_t>(var.heads), static_cast<uint32_t>(box_rows), 1};
    tk = make_tensor_map_16bit(buf.k, true, 5, dims, strides, box, true);
    tv = make_tensor_map_16bit(buf.v, true, 5, dims, strides, box, true);
  } else if (var.paged) {  // the same bytes as pages [B x L / 16][16][H][D]
    const tileattn::detail::Strides4 st{16 * H * kD, H * kD, kD, 1};
    tk = map_of(buf.k, true, st, B * L / 16, 16, H, kD, 16);
    tv = map_of(buf.v, true, st, B * L / 16, 16, H, kD, 16);
    job.table = page_table(buf, B * L / 16);
  } else {
    const tileattn::detail::Strides4 st{L * H * kD, H * kD, kD, 1};
    tk = map_of(buf.k, true, st, B, L, H, kD, static_cast<uint32_t>(box_rows));
    tv = map_of(buf.v, true, st, B, L, H, kD, static_cast<uint32_t>(box_rows));
  }
  job.prefetch = var.prefetch, job.pollers = var.pollers;
  const int need = 1024 + var.stages * 2 * static_cast<int>(job.stage_bytes);
  // Padded so that no more CTAs than asked fit an SM's 228 KiB (one: > 114 KiB; two: > 76).
  const int smem = std::max(need, (var.ctas_per_sm == 1 ? 120 : 80) * 1024);
  auto* kernel = var.wide ? &stream_kv<true> : &stream_kv<false>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  job.units = static_cast<int32_t>(units), job.flat = var.flat, job.mixed = var.mixed;
  job.kv_heads = static_cast<int32_t>(H), job.v = static_cast<const uint8_t*>(buf.v);
  const unsigned ctas = static_cast<unsigned>(var.flat ? var.ctas_per_sm * buf.sms : units * splits);
  *ctas_out = static_cast<int>(ctas);
  const unsigned threads = var.mixed ? 64 + kLoaders : 64 + 32 * var.pollers;
  return median_us(buf, [&] { kernel<<<ctas, threads, smem>>>(tk, tv, job); });
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Buffers buf{};
  CHECK(cudaDeviceGetAttribute(&buf.sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&buf.clock_khz, cudaDevAttrClockRate, 0));
  const struct { int64_t B, L; } shapes[] = {{1, 131072}, {8, 16384}, {8, 131072}};
  const int64_t most = int64_t{8} * 131072 * 8 * kD;  // elements of K (8 x 128k)
  CHECK(cudaMalloc(&buf.k, most * 2));
  CHECK(cudaMalloc(&buf.v, most * 2));
  buf.flush_n = (int64_t{256} << 20) / 16;
  CHECK(cudaMalloc(&buf.flush, buf.flush_n * 16));
  CHECK(cudaMalloc(&buf.sink, sizeof(unsigned)));
  tileattn::cuda_test::fill_hash_bf16(buf.k, most, 2);
  tileattn::cuda_test::fill_hash_bf16(buf.v, most, 3);
  tileattn::cuda_test::fill_hash_bf16(buf.flush, buf.flush_n * 8, 4);
  const Variant variants[] = {
      {"kernel's: 1 head, 128 keys x 2, half boxes", 128, 2, 1, false, 1, 0},
      {"1 head, 128 x 2, row boxes", 128, 2, 1, true, 1, 0},
      {"2 heads, 64 x 2, row boxes", 64, 2, 2, true, 1, 0},
      {"8 heads, 16 x 2, row boxes", 16, 2, 8, true, 1, 0},
      {"1 head, 64 x 4, half boxes", 64, 4, 1, false, 1, 0},
      {"1 head, 64 x 2, half boxes, 2 CTAs an SM", 64, 2, 1, false, 2, 0},
      {"1 head, 128 x 2, half boxes, consumer 1 us", 128, 2, 1, false, 1, 1000},
      {"1 head, 128 x 2, half boxes, consumer 2 us", 128, 2, 1, false, 1, 2000},
      {"1 head, 128 x 2, half boxes of 16 keys (pages)", 128, 2, 1, false, 1, 0, 16},
      {"1 head, 128 x 2, row boxes of 16 keys (pages)", 128, 2, 1, true, 1, 0, 16},
      {"1 head, 64 x 6, half boxes", 64, 6, 1, false, 1, 0},
      {"kernel's, an equal share a CTA on every SM", 128, 2, 1, false, 1, 0, 0, true},
      {"1 head, 128 x 2, K by TMA, V by cp.async", 128, 2, 1, false, 1, 0, 0, false, true},
      {"1 head, 128 x 2, K TMA, V cp.async, every SM", 128, 2, 1, false, 1, 0, 0, true, true},
      {"kernel's, 8 more warps polling each stage", 128, 2, 1, false, 1, 0, 0, false, false, false, 0, 8},
      {"paged 16, random pages, boxes of 16", 128, 2, 1, false, 1, 0, 16, false, false, true},
      {"paged 16, random, L2 prefetch 2 blocks ahead", 128, 2, 1, false, 1, 0, 16, false, false, true, 2},
      {"paged 16, random, L2 prefetch 4 blocks ahead", 128, 2, 1, false, 1, 0, 16, false, false, true, 4},
  };
  std::printf("%-46s %10s %6s %9s %8s\n", "variant", "B x L", "CTAs", "us", "GB/s");
  for (const auto& s : shapes) {
    const double bytes = 2.0 * s.B * s.L * 8 * kD * 2;
    const int64_t n = static_cast<int64_t>(bytes / 2 / 16);
    const double ceiling = median_us(buf, [&] {
      read_all<false><<<buf.sms * 4, 512>>>(static_cast<const uint4*>(buf.k),
                                            static_cast<const uint4*>(buf.v), n, buf.sink);
    });
    std::printf("%-46s %4lld x %-4lld %6d %9.1f %8.0f\n", "plain read (ceiling)", static_cast<long long>(s.B),
                static_cast<long long>(s.L / 1024), buf.sms * 4, ceiling, bytes / ceiling / 1e3);
    for (const auto& var : variants) {
      int ctas = 0;
      const double us = run_variant(buf, var, s.B, s.L, &ctas);
      std::printf("%-46s %4lld x %-4lld %6d %9.1f %8.0f\n", var.name, static_cast<long long>(s.B),
                  static_cast<long long>(s.L / 1024), ctas, us, bytes / us / 1e3);
    }
  }
  for (void* p : {buf.k, buf.v, buf.flush, static_cast<void*>(buf.sink), static_cast<void*>(buf.table)})
    if (p) CHECK(cudaFree(p));
  return 0;
}
