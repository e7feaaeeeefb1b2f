// combine.cu: the split-KV merge on the GPU: one warp per (sequence, row, head), the split
// weights in shared memory, then each lane sums its columns over the splits, many loads in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/check.h"
#include "cuda/common/split.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "tileattn/error.h"

namespace tileattn::detail::cuda {
namespace {

constexpr int kWarps = 4;

template <class T>
__device__ __forceinline__ void store_element(void* base, int64_t i, float x) {
  if constexpr (sizeof(T) == 4)
    static_cast<float*>(base)[i] = x;
  else if constexpr (std::is_same_v<T, __half>)
    static_cast<__half*>(base)[i] = __float2half_rn(x);
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
}

template <class T>
__global__ void __launch_bounds__(32 * kWarps) combine_kernel(const CombineParams c) {
  __shared__ float weights[kWarps][kMaxSplits];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t{blockIdx.x} * kWarps + warp;
  if (row >= c.batch * c.seqs.max_q * c.heads) return;
  const int64_t h = row % c.heads, b = row / c.heads / c.seqs.max_q, pos = row / c.heads % c.seqs.max_q;
  const SeqInfo seq = seq_info(c.seqs, b);
  if (pos >= seq.len_q) return;  // past the sequence: not written
  const int64_t r = seq.q_start + pos;
  const float* lse = c.lse_part + b * c.l_sb + h * c.l_sh + r * c.l_sl;
  // The largest finite partial LSE, and whether any is NaN (merge_stats in common/combine.h).
  float m = -INFINITY;
  bool nan = false;
  for (int s = lane; s < c.splits; s += 32) {
    const float x = lse[s * c.l_ss];
    if (x != x)
      nan = true;
    else
      m = fmaxf(m, x);
  }
  for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  nan = __any_sync(0xffffffffu, nan);
  float sum = 0.0f;
  for (int s = lane; s < c.splits; s += 32) {
    const float x = lse[s * c.l_ss];
    const float w = (m == -INFINITY || x == -INFINITY || nan) ? 0.0f : expf(x - m);
    weights[warp][s] = w;
    sum += w;
  }
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  __syncwarp();
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float* o = c.o_part + b * c.o_sb + r * c.o_sl + h * c.o_sh;
  const int64_t out_row = b * c.out_sb + r * c.out_sl + h * c.out_sh;
  // kCols columns a lane, the splits unrolled by 4: up to 32 independent loads in flight per lane
  // (a split at a time would wait out one memory latency per split). Every split's slot is
  // allocated; an empty split's (never written) value is read but weighs nothing by selection.
  constexpr int kCols = 8;
  for (int64_t d0 = 0; d0 < c.head_dim; d0 += 32 * kCols) {
    float acc[kCols] = {};
#pragma unroll 4
    for (int s = 0; s < c.splits; ++s) {
      const float w = weights[warp][s];
      const float* os = o + s * c.o_ss;
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        const int64_t d = d0 + lane + 32 * i;
        const float x = d < c.head_dim ? os[d * c.o_sd] : 0.0f;
        acc[i] += w != 0.0f ? w * x : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t d = d0 + lane + 32 * i;
      if (d < c.head_dim) store_element<T>(c.out, out_row + d * c.out_sd, nan ? NAN : acc[i] * inv);
    }
  }
  if (c.lse && lane == 0) c.lse[b * c.lse_sb + h * c.lse_sh + r * c.lse_sl] = merged_lse(m, sum, nan);
}

}  // namespace

void combine(const CombineParams& c) {
  if (c.device_index >= device_count())
    throw Error("out_partial", "is on cuda:" + std::to_string(c.device_index) + ", but " +
                                   std::to_string(device_count()) + " CUDA device(s) are present");
  const int64_t rows = c.batch * c.seqs.max_q * c.heads;
  if (rows == 0) return;
  DeviceGuard guard(c.device_index);
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  if (blocks > (int64_t{1} << 31) - 1) throw Error("out_partial", "has too many rows for one launch");
  const auto stream = static_cast<cudaStream_t>(c.cuda_stream);
  const dim3 grid(static_cast<unsigned>(blocks)), block(32 * kWarps);
  switch (c.out_dtype) {
    case DType::kFloat32:
      combine_kernel<float><<<grid, block, 0, stream>>>(c);
      break;
    case DType::kFloat16:
      combine_kernel<__half><<<grid, block, 0, stream>>>(c);
      break;
    case DType::kBFloat16:
      combine_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(c);
      break;
    default:
      throw Error("out", std::string("dtype ") + dtype_name(c.out_dtype) + ", expected fp32, fp16 or bf16");
  }
  TILEATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace tileattn::detail::cuda
