// blocks_test.cu: the sm90 building blocks checked on the device before any kernel relies on
// them: TMA loads (128-byte swizzle) completing on an mbarrier, wgmma SS and RS with K-major and
// N-major B against a CPU GEMM, stmatrix and stmatrix .trans, a TMA store, GQA packing's 5-D
// box, a paged block as boxes of a few rows, and setmaxnreg across three warpgroups.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/check.h"
#include "cuda/sm90/barrier.cuh"
#include "cuda/sm90/tensor_map.h"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace tileattn::detail::sm90 {
namespace {

constexpr int kM = 64, kN = 128, kK = 64;  // one warpgroup: D [64 x 128] = A [64 x 64] B

enum class Mode { kSS, kRS, kSSNMajor };

// The 16-bit word that element (row r, column d) of a [rows][64] tile occupies once TMA wrote it
// with the 128-byte swizzle: 16-byte unit d / 8 of row r sits at unit (d / 8) ^ (r % 8).
int swizzled_word(int r, int d) { return r * 64 + (((d / 8) ^ (r % 8)) * 8) + d % 8; }

__device__ uint8_t* align_1024(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

__device__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// A is [64][64] row-major (K-major). B is [128][64] row-major (K-major: D = A B^T) for kSS/kRS,
// or [64][128] row-major (N-major: D = A B) for kSSNMajor. out receives D in fp32, and as bf16
// through smem and a TMA store into out_bf16.
template <Mode kMode>
__global__ void __launch_bounds__(128, 1)
    gemm_tile(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
              const __grid_constant__ CUtensorMap map_out, const __nv_bfloat16* a_global, float* out) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  auto* sA = reinterpret_cast<__nv_bfloat16*>(smem);                   // 8 KiB
  auto* sB = reinterpret_cast<__nv_bfloat16*>(smem + 8192);            // 16 KiB
  auto* sOut = reinterpret_cast<__nv_bfloat16*>(smem + 8192 + 16384);  // 16 KiB, [64][128]
  __shared__ uint64_t bar;
  const int t = threadIdx.x;
  if (t == 0) {
    tma_prefetch_descriptor(&map_a);
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (t == 0) {
    mbarrier_arrive_expect_tx(&bar, 8192 + 16384);
    tma_load_2d(sA, &map_a, &bar, 0, 0);
    if constexpr (kMode == Mode::kSSNMajor) {  // two 64-column chunks of [64 k][128 n]
      tma_load_2d(sB, &map_b, &bar, 0, 0);
      tma_load_2d(sB + 64 * 64, &map_b, &bar, 64, 0);
    } else {
      tma_load_2d(sB, &map_b, &bar, 0, 0);
    }
  }
  mbarrier_wait(&bar, 0);

  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  // RS: this thread's A fragments (HOPPER_FACTS B3), loaded before the fence so no register a
  // wgmma reads is written between the wgmmas.
  uint32_t a[kK / 16][4];
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
    const int r0 = 16 * w + g, r1 = r0 + 8, c = 16 * k + 2 * q;
    a[k][0] = pack_bf16(a_global[r0 * kK + c], a_global[r0 * kK + c + 1]);
    a[k][1] = pack_bf16(a_global[r1 * kK + c], a_global[r1 * kK + c + 1]);
    a[k][2] = pack_bf16(a_global[r0 * kK + c + 8], a_global[r0 * kK + c + 9]);
    a[k][3] = pack_bf16(a_global[r1 * kK + c + 8], a_global[r1 * kK + c + 9]);
  }
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
    if constexpr (kMode == Mode::kSSNMajor) {
      const uint64_t desc_a = desc_advance(make_smem_desc(sA, 16, 1024), 32 * k);
      const uint64_t desc_b = desc_advance(make_smem_desc(sB, 64 * 128, 1024), 2048 * k);
      WgmmaOp<kN, true>::ss<1>(d, desc_a, desc_b, 1);
    } else {
      const uint64_t desc_b = desc_advance(make_smem_desc(sB, 16, 1024), 32 * k);
      if constexpr (kMode == Mode::kSS) {
        const uint64_t desc_a = desc_advance(make_smem_desc(sA, 16, 1024), 32 * k);
        WgmmaOp<kN, true>::ss<0>(d, desc_a, desc_b, 1);
      } else {
        WgmmaOp<kN, true>::rs<0>(d, a[k], desc_b, 1);
      }
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands<kN / 2>(d);

#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    out[row * kN + col] = d[i];
    sOut[row * kN + col] = __float2bfloat16_rn(d[i]);
  }
  fence_proxy_async();
  __syncthreads();
  if (t == 0) {
    tma_store_2d(&map_out, sOut, 0, 0);
    tma_store_commit();
    tma_store_wait_read();
  }
}

__global__ void __launch_bounds__(384, 1) setmaxnreg_roles(int* out) {
  const int wg = warpgroup_index();
  if (wg == 0) {
    warpgroup_reg_dealloc<24>();
    out[threadIdx.x] = 1;
  } else {
    warpgroup_reg_alloc<240>();
    out[threadIdx.x] = 2 + wg;
  }
}

bool on_hopper() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  cudaDeviceProp prop{};
  TILEATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.major == 9 && prop.minor == 0;
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t n) { TILEATTN_CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(ptr); }
};

void run_gemm(Mode mode) {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<__nv_bfloat16> a(kM * kK), b(kN * kK);
  for (auto& x : a) x = __float2bfloat16(normal(rng));
  for (auto& x : b) x = __float2bfloat16(normal(rng));
  const bool n_major = mode == Mode::kSSNMajor;

  DeviceArray<__nv_bfloat16> da(a.size()), db(b.size()), dout16(kM * kN);
  DeviceArray<float> dout(kM * kN);
  TILEATTN_CUDA_CHECK(cudaMemcpy(da.ptr, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  TILEATTN_CUDA_CHECK(cudaMemcpy(db.ptr, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  TILEATTN_CUDA_CHECK(cudaMemset(dout.ptr, 0xff, kM * kN * sizeof(float)));  // NaN poison
  TILEATTN_CUDA_CHECK(cudaMemset(dout16.ptr, 0xff, kM * kN * 2));

  const uint64_t a_dims[2] = {kK, kM}, a_strides[1] = {kK * 2};
  const uint32_t a_box[2] = {64, 64};
  const CUtensorMap map_a = make_tensor_map_16bit(da.ptr, true, 2, a_dims, a_strides, a_box, true);
  const uint64_t bk_dims[2] = {kK, kN}, bk_strides[1] = {kK * 2};
  const uint32_t bk_box[2] = {64, kN};
  const uint64_t bn_dims[2] = {kN, kK}, bn_strides[1] = {kN * 2};
  const uint32_t bn_box[2] = {64, 64};
  const CUtensorMap map_b = n_major
                                ? make_tensor_map_16bit(db.ptr, true, 2, bn_dims, bn_strides, bn_box, true)
                                : make_tensor_map_16bit(db.ptr, true, 2, bk_dims, bk_strides, bk_box, true);
  const uint64_t o_dims[2] = {kN, kM}, o_strides[1] = {kN * 2};
  const uint32_t o_box[2] = {kN, kM};
  const CUtensorMap map_out = make_tensor_map_16bit(dout16.ptr, true, 2, o_dims, o_strides, o_box, false);

  const int smem = 1024 + 8192 + 16384 + 16384;
  auto kernel = mode == Mode::kSS   ? gemm_tile<Mode::kSS>
                : mode == Mode::kRS ? gemm_tile<Mode::kRS>
                                    : gemm_tile<Mode::kSSNMajor>;
  TILEATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(map_a, map_b, map_out, da.ptr, dout.ptr);
  TILEATTN_CUDA_CHECK(cudaGetLastError());
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<float> out(kM * kN);
  std::vector<__nv_bfloat16> out16(kM * kN);
  TILEATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.ptr, out.size() * 4, cudaMemcpyDeviceToHost));
  TILEATTN_CUDA_CHECK(cudaMemcpy(out16.data(), dout16.ptr, out16.size() * 2, cudaMemcpyDeviceToHost));
  double max_err = 0, max_err16 = 0;
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) {
      double ref = 0;
      for (int k = 0; k < kK; ++k) {
        const float bv = n_major ? __bfloat162float(b[k * kN + j]) : __bfloat162float(b[j * kK + k]);
        ref += static_cast<double>(__bfloat162float(a[i * kK + k])) * bv;
      }
      max_err = std::fmax(max_err, std::fabs(out[i * kN + j] - ref));
      max_err16 =
          std::fmax(max_err16, std::fabs(__bfloat162float(out16[i * kN + j]) - ref) / (1 + std::fabs(ref)));
      ASSERT_FALSE(std::isnan(out[i * kN + j])) << "unwritten element " << i << ", " << j;
    }
  // Products of bf16 are exact in fp32; only the fp32 sum order differs from the reference.
  EXPECT_LT(max_err, 1e-3);
  EXPECT_LT(max_err16, 1.0 / 128);  // bf16 rounding of the stored copy
}

TEST(Sm90Blocks, WgmmaSharedSharedKMajor) { run_gemm(Mode::kSS); }
TEST(Sm90Blocks, WgmmaRegisterSharedKMajor) { run_gemm(Mode::kRS); }
TEST(Sm90Blocks, WgmmaSharedSharedNMajorB) { run_gemm(Mode::kSSNMajor); }

TEST(Sm90Blocks, SetmaxnregMovesRegistersBetweenWarpgroups) {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  DeviceArray<int> dout(384);
  TILEATTN_CUDA_CHECK(cudaMemset(dout.ptr, 0, 384 * sizeof(int)));
  setmaxnreg_roles<<<1, 384>>>(dout.ptr);
  TILEATTN_CUDA_CHECK(cudaGetLastError());
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int> out(384);
  TILEATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.ptr, 384 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int t = 0; t < 384; ++t) EXPECT_EQ(out[t], t < 128 ? 1 : 2 + t / 128) << "thread " << t;
}

// stmatrix (wgmma.cuh), as the forward's lean epilogue stores O, and stmatrix .trans, as the
// backward stores dS: lane t's register q holds elements (row t / 4, columns 2 (t % 4) and + 1)
// of matrix q, each element's value q * 64 + row * 8 + column; memory row i of matrix q (at q *
// 128 + i * 16 bytes) must hold the matrix's row i, or with .trans its column i.
template <bool kTrans>
__global__ void stmatrix_probe(uint16_t* out) {
  __shared__ alignas(128) uint16_t tile[4 * 64];
  const int t = threadIdx.x, row = t / 4, col = 2 * (t % 4);
  uint32_t r[4];
  for (int q = 0; q < 4; ++q)
    r[q] = static_cast<uint32_t>(q * 64 + row * 8 + col) |
           (static_cast<uint32_t>(q * 64 + row * 8 + col + 1) << 16);
  const uint32_t addr = smem_addr(tile) + (t / 8) * 128 + (t % 8) * 16;
  if constexpr (kTrans)
    stmatrix_x4_trans(addr, r[0], r[1], r[2], r[3]);
  else
    stmatrix_x4(addr, r[0], r[1], r[2], r[3]);
  __syncwarp();
  for (int i = t; i < 4 * 64; i += 32) out[i] = tile[i];
}

template <bool kTrans>
void check_stmatrix() {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  DeviceArray<uint16_t> dout(4 * 64);
  TILEATTN_CUDA_CHECK(cudaMemset(dout.ptr, 0xff, 4 * 64 * sizeof(uint16_t)));
  stmatrix_probe<kTrans><<<1, 32>>>(dout.ptr);
  TILEATTN_CUDA_CHECK(cudaGetLastError());
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(4 * 64);
  TILEATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.ptr, out.size() * 2, cudaMemcpyDeviceToHost));
  for (int q = 0; q < 4; ++q)
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 8; ++k)
        ASSERT_EQ(out[q * 64 + i * 8 + k], q * 64 + (kTrans ? k * 8 + i : i * 8 + k))
            << "matrix " << q << " row " << i << " word " << k;
}

TEST(Sm90Blocks, StmatrixStoresRows) { check_stmatrix<false>(); }
TEST(Sm90Blocks, StmatrixTransStoresColumnsAsRows) { check_stmatrix<true>(); }

// GQA packing's 5-D box (launch.cuh, packed_map_of): [B, L, H, D] viewed as (D, pack, H / pack, L,
// B). A box of `rows` rows at head group 1 must put position r / pack of head pack + r % pack in
// shared-memory row r, 128-byte swizzled (16-byte unit u of row r at u ^ (r % 8)), read positions
// past L as zero, and store back only positions below L. The kernel copies the box, as it landed,
// to `raw`, then stores it into `out`. A load may start at a negative position (the forward's
// tiles aligned to the sequence's end, scheduler.cuh): positions below 0 read as zero. A store
// there is an illegal instruction (cudaErrorIllegalInstruction on an H100, 2852042, a box wholly
// before position 0), so the kernel stores only boxes at positions >= 0, as the forward does.
constexpr int kPackL = 5, kPackLAlloc = 8, kPackH = 8, kPack = 4, kPackD = 64, kPackRows = 32;

__global__ void __launch_bounds__(128, 1)
    packed_box(const __grid_constant__ CUtensorMap map_in, const __grid_constant__ CUtensorMap map_out,
               uint16_t* raw, int pos0) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, kPackRows * 128);
    tma_load_5d(smem, &map_in, &bar, 0, 0, 1, pos0, 0);
  }
  mbarrier_wait(&bar, 0);
  const uint16_t* words = reinterpret_cast<const uint16_t*>(smem);
  for (int i = threadIdx.x; i < kPackRows * 64; i += blockDim.x) raw[i] = words[i];
  fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    tma_store_5d(&map_out, smem, 0, 0, 1, pos0 < 0 ? 0 : pos0, 0);
    tma_store_commit();
    tma_store_wait_read();
  }
}

// The box at position pos0 (the first of kPackRows / kPack positions).
void check_packed_box(int pos0) {
  const int n = kPackLAlloc * kPackH * kPackD;  // [1, L, H, D], rows past L allocated
  std::vector<uint16_t> in(n), poison(n, 0x7fc1);
  for (int i = 0; i < n; ++i) in[i] = static_cast<uint16_t>(0x3c00 + (i % 8191));  // distinct finite bf16
  DeviceArray<uint16_t> din(n), dout(n), draw(kPackRows * 64);
  TILEATTN_CUDA_CHECK(cudaMemcpy(din.ptr, in.data(), n * 2, cudaMemcpyHostToDevice));
  TILEATTN_CUDA_CHECK(cudaMemcpy(dout.ptr, poison.data(), n * 2, cudaMemcpyHostToDevice));
  const uint64_t dims[5] = {kPackD, kPack, kPackH / kPack, kPackL, 1};
  const uint64_t strides[4] = {kPackD * 2, kPackD * 2 * kPack, kPackH * kPackD * 2,
                               kPackL * kPackH * kPackD * 2};
  const uint32_t box[5] = {64, kPack, 1, kPackRows / kPack, 1};
  const CUtensorMap map_in = make_tensor_map_16bit(din.ptr, true, 5, dims, strides, box, true);
  const CUtensorMap map_out = make_tensor_map_16bit(dout.ptr, true, 5, dims, strides, box, true);
  const int smem = 1024 + kPackRows * 128;
  packed_box<<<1, 128, smem>>>(map_in, map_out, draw.ptr, pos0);
  TILEATTN_CUDA_CHECK(cudaGetLastError());
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> raw(kPackRows * 64), out(n);
  TILEATTN_CUDA_CHECK(cudaMemcpy(raw.data(), draw.ptr, raw.size() * 2, cudaMemcpyDeviceToHost));
  TILEATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.ptr, n * 2, cudaMemcpyDeviceToHost));
  auto at = [](int l, int h, int d) { return (l * kPackH + h) * kPackD + d; };
  for (int r = 0; r < kPackRows; ++r)
    for (int d = 0; d < kPackD; ++d) {
      const int pos = pos0 + r / kPack, head = kPack + r % kPack;
      const int word = swizzled_word(r, d);
      const uint16_t want = pos >= 0 && pos < kPackL ? in[at(pos, head, d)] : 0;
      ASSERT_EQ(raw[word], want) << "box at " << pos0 << ": row " << r << " column " << d;
    }
  for (int l = 0; l < kPackLAlloc; ++l)
    for (int h = 0; h < kPackH; ++h)
      for (int d = 0; d < kPackD; ++d) {
        // The store's box starts at max(pos0, 0) and holds the rows as loaded at pos0.
        const int first = pos0 < 0 ? 0 : pos0, src = l - first + pos0;
        const bool stored = l >= first && l < first + kPackRows / kPack && l < kPackL && h >= kPack;
        const uint16_t want = src >= 0 && src < kPackL ? in[at(src, h, d)] : 0;
        ASSERT_EQ(out[at(l, h, d)], stored ? want : poison[0])
            << "box at " << pos0 << ": l " << l << " h " << h << " d " << d;
      }
}

TEST(Sm90Blocks, TmaPackedBoxLoadsHeadsAsRowsAndStoresThemBack) {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  check_packed_box(0);
  check_packed_box(2);
}

TEST(Sm90Blocks, TmaBoxBeforePositionZeroReadsZeros) {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  check_packed_box(-3);
  check_packed_box(-8);  // wholly before the tensor
}

// A paged key block (mainloop.cuh, produce_tile): kPagedN rows of one 64-column chunk loaded as
// boxes of kPagedBox rows from shuffled pages of a [pages, page_size, 1, 64] cache, each box
// landing kPagedBox x 128 bytes further on. The rows must sit where one box of kPagedN rows over
// the pages in order would put them: row r at smem row r, 16-byte unit u at u ^ (r % 8).
constexpr int kPagedN = 128, kPagedBox = 16, kPagedPages = 12;

__global__ void __launch_bounds__(32, 1)
    paged_boxes(const __grid_constant__ CUtensorMap map, const int* pages, uint16_t* raw) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_1024(smem_raw);
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_barrier_init();
    mbarrier_arrive_expect_tx(&bar, kPagedN * 128);
    for (int i = 0; i < kPagedN / kPagedBox; ++i)
      tma_load_4d(smem + i * kPagedBox * 128, &map, &bar, 0, 0, 0, pages[i]);
  }
  __syncwarp();
  mbarrier_wait(&bar, 0);
  const uint16_t* words = reinterpret_cast<const uint16_t*>(smem);
  for (int i = threadIdx.x; i < kPagedN * 64; i += blockDim.x) raw[i] = words[i];
}

TEST(Sm90Blocks, TmaBoxesFromPagesLandAsOneBlock) {
  if (!on_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int n = kPagedPages * kPagedBox * 64;  // pages of kPagedBox positions, 1 head, D = 64
  std::vector<uint16_t> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<uint16_t>(0x3c00 + (i % 8191));
  const std::vector<int> pages = {5, 0, 11, 3, 7, 2, 9, 4};  // block row r: page pages[r / 16]
  DeviceArray<uint16_t> din(n), draw(kPagedN * 64);
  DeviceArray<int> dpages(static_cast<int>(pages.size()));
  TILEATTN_CUDA_CHECK(cudaMemcpy(din.ptr, in.data(), n * 2, cudaMemcpyHostToDevice));
  TILEATTN_CUDA_CHECK(
      cudaMemcpy(dpages.ptr, pages.data(), pages.size() * sizeof(int), cudaMemcpyHostToDevice));
  const uint64_t dims[4] = {64, 1, kPagedBox, kPagedPages};
  const uint64_t strides[3] = {64 * 2, 64 * 2, kPagedBox * 64 * 2};
  const uint32_t box[4] = {64, 1, kPagedBox, 1};
  const CUtensorMap map = make_tensor_map_16bit(din.ptr, true, 4, dims, strides, box, true);
  paged_boxes<<<1, 32, 1024 + kPagedN * 128>>>(map, dpages.ptr, draw.ptr);
  TILEATTN_CUDA_CHECK(cudaGetLastError());
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> raw(kPagedN * 64);
  TILEATTN_CUDA_CHECK(cudaMemcpy(raw.data(), draw.ptr, raw.size() * 2, cudaMemcpyDeviceToHost));
  for (int r = 0; r < kPagedN; ++r)
    for (int d = 0; d < 64; ++d) {
      const int word = swizzled_word(r, d);
      const int source = (pages[r / kPagedBox] * kPagedBox + r % kPagedBox) * 64 + d;
      ASSERT_EQ(raw[word], in[source]) << "row " << r << " column " << d;
    }
}
}  // namespace
}  // namespace tileattn::detail::sm90
