// launch.cuh: launching the sm90 forward for one config: TMA tensor maps over the [B, L, H, D]
// tensors, the kernel's parameters, the grid. Included by forward.cu and the tuning build.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/split.h"
#include "cuda/cuda_api.h"
#include "cuda/sm90/kernel.cuh"
#include "cuda/sm90/tensor_map.h"
#include "cuda/sm90/tile_order.h"

namespace tileattn::detail::sm90 {

// Q and O: a 5-D map that packs `pack` query heads of one KV head into a tile's rows: dims
// (D, pack, heads / pack, L, B), box 64 x pack x 1 x rows / pack x 1, so row r of a box is
// position r / pack of head r % pack (pack 1: one head, rows are positions). Positions past L
// read as zero and are not written.
inline CUtensorMap packed_map_of(const void* base, bool bf16, const Strides4& st, int64_t batch, int64_t len,
                                 int64_t heads, int64_t head_dim, int pack, uint32_t rows) {
  const uint64_t dims[5] = {static_cast<uint64_t>(head_dim), static_cast<uint64_t>(pack),
                            static_cast<uint64_t>(heads / pack), static_cast<uint64_t>(len),
                            static_cast<uint64_t>(batch)};
  const uint64_t strides[4] = {static_cast<uint64_t>(st.h) * 2, static_cast<uint64_t>(st.h) * 2 * pack,
                               static_cast<uint64_t>(st.l) * 2, static_cast<uint64_t>(st.b) * 2};
  const uint32_t box[5] = {64, static_cast<uint32_t>(pack), 1, rows / pack, 1};
  return make_tensor_map_16bit(base, bf16, 5, dims, strides, box, true);
}

template <class Cfg, class T, class Mask, bool kServing, bool kGather = false>
void launch(const AttnParams& p, int pack, int splits) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  static_assert(kCfg.smem_bytes() <= 227 * 1024, "the config needs more shared memory than a CTA may have");
  const bool bf16 = p.dtype == DType::kBFloat16;
  const MapView vq = map_view(p.q_stride, p.batch, p.seqlen_q, p.seqs.varlen_q(), p.total_q);
  const MapView vo = map_view(p.out_stride, p.batch, p.seqlen_q, p.seqs.varlen_q(), p.total_q);
  MapView vk = map_view(p.k_stride, p.batch, p.seqlen_k, p.seqs.cu_k != nullptr, p.total_k);
  MapView vv = map_view(p.v_stride, p.batch, p.seqlen_k, p.seqs.cu_k != nullptr, p.total_k);
  // A KV cache: [cache rows, capacity, Hkv, D] with cache_batch_idx, [pages, page_size, Hkv, D]
  // paged, its boxes page_box rows; 0: gathered by cp.async (page sizes boxes do not fit, left
  // padding), the maps then unused (boxes of one row, any page size takes).
  const bool paged = p.page_table != nullptr;
  const uint32_t kv_box = !paged    ? kCfg.block_n
                          : kGather ? 0u
                                    : static_cast<uint32_t>(page_box(p.page_size, kCfg.block_n));
  if (paged || p.kv_batch_idx) {
    const int64_t len = paged ? p.page_size : p.seqlen_k;
    vk = MapView{p.k_stride, p.cache_rows, len}, vv = MapView{p.v_stride, p.cache_rows, len};
  }
  const CUtensorMap tm_q =
      packed_map_of(p.q, bf16, vq.strides, vq.batch, vq.len, p.heads_q, kCfg.head_dim, pack, kCfg.block_m());
  // Each consumer stores its own 64 rows (a packed varlen q stores them without TMA).
  const CUtensorMap tm_o =
      packed_map_of(p.out, bf16, vo.strides, vo.batch, vo.len, p.heads_q, kCfg.head_dim, pack, 64);
  const uint32_t map_rows = kv_box > 0 ? kv_box : 1;
  const CUtensorMap tm_k =
      map_of(p.k, bf16, vk.strides, vk.batch, vk.len, p.heads_kv, kCfg.head_dim, map_rows);
  const CUtensorMap tm_v =
      map_of(p.v, bf16, vv.strides, vv.batch, vv.len, p.heads_kv, kCfg.head_dim, map_rows);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.cuda_stream);
  auto* kernel = &attention_fwd_sm90<Cfg, T, Mask, kServing, kGather>;
  cuda::set_max_dynamic_smem<&attention_fwd_sm90<Cfg, T, Mask, kServing, kGather>>(kCfg.smem_bytes(),
                                                                                   p.device_index);
  cuda::KernelParams params = cuda::make_kernel_params(p, kCfg.block_m(), pack, splits);
  params.page_box = static_cast<int>(kv_box);
  if constexpr (kCfg.lpt_mib != 0) {  // a tuning order: sections of pairs whose K and V fit
    params.order_pairs = params.m_blocks > 0 ? params.tiles / (params.m_blocks * splits) : 0;
    params.order_section = lpt_section(kCfg.lpt_mib, 2 * p.seqlen_k * kCfg.head_dim * 2, params.order_pairs);
  }
  cuda::run_split(p, params, [&](cuda::KernelParams kp) {
    int64_t ctas = kp.tiles;
    if constexpr (Cfg::kCfg.persistent)
      ctas = std::min<int64_t>(ctas, cuda::device_info(p.device_index).sm_count);
    // The stream's scratch ints (cuda_api.h: zero when a launch starts, reset by the CTAs that use
    // them last; no allocation or memset on the launch path once they suffice): the persistent
    // CTAs' tile counter [0, 2), then split-KV's arrival counters. A stream being captured into a
    // graph gets ints of its own from the graph (allocation, memset and free nodes), since a graph
    // may be replayed on any stream, next to other launches.
    // Up to 32 splits merge in the kernel (epilogue.cuh: a split's weight in a lane) when each
    // CTA has one tile (the kernel merges after its tile loop); more, more tiles than CTAs, or a
    // config that does not merge: the combine kernel.
    const bool merges = Cfg::kCfg.merges_splits() && kp.splits > 1 && kp.splits <= 32 && kp.tiles <= ctas;
    const int64_t arrivals = merges ? kp.tiles / kp.splits * Cfg::kCfg.consumers : 0;
    const int64_t ints = 2 + arrivals;
    struct GraphScratch {
      int* ptr = nullptr;
      cudaStream_t stream;
      ~GraphScratch() {
        if (ptr) cudaFreeAsync(ptr, stream);
      }
    } graph_scratch{nullptr, stream};
    int* scratch = nullptr;
    if (Cfg::kCfg.persistent || arrivals > 0) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      TILEATTN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
      if (capture == cudaStreamCaptureStatusNone) {
        scratch = cuda::stream_scratch(p.device_index, p.cuda_stream, ints);
      } else {
        TILEATTN_CUDA_CHECK(
            cudaMallocAsync(reinterpret_cast<void**>(&graph_scratch.ptr), ints * sizeof(int), stream));
        scratch = graph_scratch.ptr;
        TILEATTN_CUDA_CHECK(cudaMemsetAsync(scratch, 0, ints * sizeof(int), stream));
      }
    }
    kp.arrivals = arrivals > 0 ? scratch + 2 : nullptr;
    kernel<<<dim3(static_cast<unsigned>(ctas)), Cfg::kCfg.threads(), Cfg::kCfg.smem_bytes(), stream>>>(
        tm_q, tm_k, tm_v, tm_o, kp, Cfg::kCfg.persistent ? scratch : nullptr);
    TILEATTN_CUDA_CHECK_LAUNCH();
    return merges;
  });
}

// The dtype and mask policy of p (cuda/common/launch.cuh), the GQA packing and the split count,
// for one config. Batches whose sequences differ (varlen, seqused) or that split run the serving
// kernel; the rest the dense one, which keeps no per-sequence state in registers.
// launch_for's GQA packing and split count for one config (the tuning builds launch with them).
struct LaunchShape {
  int pack, splits;
  int64_t tiles;  // query tiles, before the splits
};
template <class Cfg>
LaunchShape launch_shape(const AttnParams& p) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  const int pack = kCfg.gqa_packing ? pack_factor(p.seqlen_q, p.group_size(), kCfg.block_m()) : 1;
  const int64_t tiles =
      (p.seqlen_q * pack + kCfg.block_m() - 1) / kCfg.block_m() * (p.heads_q / pack) * p.batch;
  return {
      pack,
      cuda::cap_splits(cuda::resolve_splits(p, tiles, (p.seqlen_k + kCfg.block_n - 1) / kCfg.block_n), tiles),
      tiles};
}

// ServingCfg: the serving kernel's config for a long decode (tile_config.h): a tile's packed
// rows fit one consumer, each split streams 32 key blocks or more; its tiles are Cfg's. Plain
// decodes without splits take it too (the serving kernel then with one split and no sequence
// tensors). Varlen prefill, short splits (1 x 32k: 16 blocks a split) and paged caches keep Cfg
// (measured on an H200, docs/kernels/sm90_serving.md). OnlyT: the one element type instantiated (the
// tuning builds time bf16 alone; another dtype is refused), void: every one.
template <class Cfg, class ServingCfg = Cfg, class OnlyT = void>
void launch_for(const AttnParams& p) {
  constexpr TileConfig kCfg = Cfg::kCfg;
  static_assert(ServingCfg::kCfg.block_m() == kCfg.block_m() && ServingCfg::kCfg.block_n == kCfg.block_n,
                "the serving config must tile as the dense one (one pack and split count)");
  const LaunchShape shape = launch_shape<Cfg>(p);
  const int pack = shape.pack, splits = shape.splits;
  const bool serving = splits > 1 || p.seqs.ragged() || p.page_table || p.kv_batch_idx;
  const bool decodes = !std::is_same_v<Cfg, ServingCfg> && !p.page_table && p.seqlen_q * pack <= 64 &&
                       (p.seqlen_k + kCfg.block_n - 1) / kCfg.block_n >= 32 * int64_t{splits};
  cuda::for_dtype_and_mask(p, [&](auto element, auto mask) {
    using T = decltype(element);
    using Mask = typename decltype(mask)::type;
    if constexpr (!std::is_void_v<OnlyT> && !std::is_same_v<T, OnlyT>) {
      throw RuntimeError("sm90 launch_for: this build instantiates one element type only");
    } else if (serving && p.page_table && gathers_pages(p.page_size, p.seqs.start_k != nullptr, kCfg.block_n))
      launch<Cfg, T, Mask, true, true>(p, pack, splits);
    else if (decodes)
      launch<ServingCfg, T, Mask, true>(p, pack, splits);
    else if (serving)
      launch<Cfg, T, Mask, true>(p, pack, splits);
    else
      launch<Cfg, T, Mask, false>(p, pack, splits);
  });
}

}  // namespace tileattn::detail::sm90
