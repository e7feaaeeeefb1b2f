// bwd_launch.cuh: launching the sm90 backward kernel (bwd_kernel.cuh) for one head dim, dtype,
// mask and batch kind: its TMA maps and grid. Included by bwd.cu and the tuning build.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <type_traits>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/cuda_api.h"
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/tensor_map.h"

namespace tileattn::detail::sm90 {

// The persistent variant's grid: a CTA a tile up to one an SM; beyond, under a mask (banded), a
// count coprime with the key blocks (CTA c walks tiles c, c + G, ..., batch and head major: with
// G a multiple of n_blocks every CTA would keep one key block position, and a mask's positions
// differ in length).
inline int64_t bwd_persistent_ctas(int64_t tiles, int64_t n_blocks, int sm_count, bool banded) {
  if (tiles <= sm_count || !banded) return std::min<int64_t>(tiles, sm_count);
  int64_t g = sm_count;
  while (g > 1 && std::gcd(g, n_blocks) != 1) --g;
  return g;
}

// kVarlen: cu_seqlens or seqused (a packed tensor's map is one batch entry of all its rows).
// kPersistent: one CTA an SM walking the tiles (a tuning variant, bwd_kernel.cuh), launched
// cooperatively: every CTA resident at once, which deterministic mode's waits on other CTAs'
// tiles need (the launch fails rather than run part of the grid). persistent_ctas > 0 sets its
// grid (clamped to the tiles and the SMs; tests walk tiles over small grids). Tuning: the
// kernel's tuning knobs and timeline marks (bwd_kernel.cuh: BwdTuning).
template <int kD, class T, class Mask, bool kVarlen, bool kPersistent = false, class Tuning = BwdTuning>
void launch_bwd(const BackwardParams& b, const BwdParams& kp, int64_t persistent_ctas = 0) {
  const AttnParams& p = b.fwd;
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  using Smem = BwdSmem<kD, Mask::kMasks>;
  constexpr int kM = Smem::kM;
  const bool packed_q = p.seqs.cu_q != nullptr, packed_k = p.seqs.cu_k != nullptr;
  const MapView vq = map_view(p.q_stride, p.batch, p.seqlen_q, packed_q, p.total_q);
  const MapView vdo = map_view(b.dout_stride, p.batch, p.seqlen_q, packed_q, p.total_q);
  const MapView vk = map_view(p.k_stride, p.batch, p.seqlen_k, packed_k, p.total_k);
  const MapView vv = map_view(p.v_stride, p.batch, p.seqlen_k, packed_k, p.total_k);
  const CUtensorMap tm_q = map_of(p.q, bf16, vq.strides, vq.batch, vq.len, p.heads_q, kD, kM);
  const CUtensorMap tm_do = map_of(b.dout, bf16, vdo.strides, vdo.batch, vdo.len, p.heads_q, kD, kM);
  const CUtensorMap tm_k = map_of(p.k, bf16, vk.strides, vk.batch, vk.len, p.heads_kv, kD, bwd_block_n(kD));
  const CUtensorMap tm_v = map_of(p.v, bf16, vv.strides, vv.batch, vv.len, p.heads_kv, kD, bwd_block_n(kD));
  constexpr int kSmem = Smem::kBytes;
  auto* const kernel = &attention_bwd_sm90<kD, T, Mask, kVarlen, kPersistent, Tuning>;
  cuda::set_max_dynamic_smem<&attention_bwd_sm90<kD, T, Mask, kVarlen, kPersistent, Tuning>>(kSmem,
                                                                                             p.device_index);
  const int64_t tiles = kp.n_blocks * kp.heads_kv * kp.batch;
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  if constexpr (!kPersistent) {
    dim3 grid(static_cast<unsigned>(tiles));
    if (!Mask::kMasks && kp.dq_order != nullptr &&
        kp.det_group_log2 > 0) {  // pairs interleaved (grouped_tile)
      const int64_t pairs = kp.heads_kv * kp.batch;
      if (pairs % (int64_t{1} << kp.det_group_log2) != 0)  // det_pair_group_log2 picks divisors only
        throw RuntimeError("sm90 backward: det_group_log2 " + std::to_string(kp.det_group_log2) +
                           " does not divide the " + std::to_string(pairs) + " (batch, KV head) pairs");
      grid = dim3(static_cast<unsigned>(kp.n_blocks << kp.det_group_log2),
                  static_cast<unsigned>(pairs >> kp.det_group_log2));
    }
    kernel<<<grid, 3 * kWarpgroupThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, kp);
    TILEATTN_CUDA_CHECK_LAUNCH();
  } else {
    const int sms = cuda::device_info(p.device_index).sm_count;
    const int64_t ctas = persistent_ctas > 0 ? std::min<int64_t>({persistent_ctas, tiles, sms})
                                             : bwd_persistent_ctas(tiles, kp.n_blocks, sms, Mask::kMasks);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(ctas));
    config.blockDim = dim3(3 * kWarpgroupThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    config.attrs = &cooperative;
    config.numAttrs = 1;
    TILEATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, tm_q, tm_k, tm_v, tm_do, kp));
  }
}

}  // namespace tileattn::detail::sm90
