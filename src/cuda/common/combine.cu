// combine.cu: the split-KV merge on the GPU: one warp per (sequence, row, head) (merge.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/common/merge.cuh"
#include "cuda/common/split.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "tileattn/error.h"

namespace tileattn::detail::cuda {
namespace {

constexpr int kWarps = 4;

template <class T>
__global__ void __launch_bounds__(32 * kWarps) combine_kernel(const CombineParams c) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t{blockIdx.x} * kWarps + warp;
  if (row >= c.batch * c.seqs.max_q * c.heads) return;
  const int64_t h = row % c.heads, b = row / c.heads / c.seqs.max_q, pos = row / c.heads % c.seqs.max_q;
  const SeqInfo seq = seq_info(c.seqs, b);
  if (pos >= seq.len_q) return;  // past the sequence: not written
  const int64_t r = seq.q_start + pos;
  const float lse = merge_row<T, kMaxSplits / 32, 8, 4>(
      c.lse_part + b * c.l_sb + h * c.l_sh + r * c.l_sl, c.l_ss,
      c.o_part + b * c.o_sb + r * c.o_sl + h * c.o_sh, c.o_ss, c.o_sd, c.splits, c.head_dim, c.out,
      b * c.out_sb + r * c.out_sl + h * c.out_sh, c.out_sd);
  if (c.lse && lane == 0) c.lse[b * c.lse_sb + h * c.lse_sh + r * c.lse_sl] = lse;
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
