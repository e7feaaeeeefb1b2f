// cuda_api.h: host entry points of the CUDA part of the library (no CUDA headers here).
// Compiled only when the build has CUDA (TILEATTN_WITH_CUDA).
#pragma once

#include <cstdint>
#include <string>

#include "common/combine.h"
#include "common/kvcache_check.h"
#include "common/params.h"
#include "common/seqlens_check.h"

namespace tileattn::detail::cuda {

struct DeviceInfo {
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::string name;
};

int device_count();  // 0 when there is no driver or no GPU
DeviceInfo device_info(int index);
bool sm90_built();  // whether the sm90a kernels are compiled in
// At least `ints` device ints for one stream's launches (persistent kernels' tile counter and
// count of finished CTAs, then split-KV arrival counters), allocated on the current device and
// zeroed on the stream at first use or when a launch needs more, kept for the process. Keyed by
// the stream's id (cudaStreamGetId), so a per-thread default stream is its own. Each launch
// leaves the ints it used at zero when it ends (the CTAs that used them last reset them), so the
// next launch on the stream, from any host thread, starts from zero.
int* stream_scratch(int device, void* stream, int64_t ints);

void forward(const AttnParams& p, Kernel kernel);   // a validated problem on device tensors
void backward(const BackwardParams& b, bool sm90);  // a validated backward (sm90's or sm80's)
// The most bytes of fp32 dQ sums one sm90 backward launch may take (<= 0: no cap; by default
// kSm90DqCapBytes); above it the KV heads go in groups (backward.cc). Returns the cap it replaced.
constexpr int64_t kSm90DqCapBytes = int64_t{1} << 30;
int64_t set_sm90_backward_dq_cap(int64_t bytes);
// Deterministic mode without a mask on the sm90 backward: the L2 bytes under which the launch
// order interleaves (batch, KV head) pairs (sm90/bwd_order.h: det_pair_group_log2); <= 0: never. By
// default kSm90DetGroupL2Bytes, 16 MiB: every grouping it picks on an H100's tuning run was faster
// than the plain order (docs/kernels/sm90_log.md). Returns the budget it replaced.
constexpr int64_t kSm90DetGroupL2Bytes = int64_t{16} << 20;
int64_t set_sm90_backward_det_budget(int64_t bytes);
void combine(const CombineParams& c);  // split-KV partial states merged (combine.cu)
// Options::check_indices: p's device index tensors checked on the device by the host's checks
// (one sync); faults[0] for the q side, faults[1] for the k side.
void find_index_faults(const AttnParams& p, IndexFaultAt faults[2]);
int64_t eager(const AttnParams& p);  // S and P in device memory; returns their bytes

// forward_kvcache on the device (kvcache_append.cu). What the append reads besides p (whose
// k / v, strides, page_table, kv_batch_idx and seqs.start_k describe the cache, all pointers
// device memory).
struct KvAppend {
  KvIndices indices;  // device pointers; the sizes of kvcache_args.h's plan
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  Strides4 k_new_stride, v_new_stride;  // packed: batch stride 0, rows at cu_new[b] + i
  const void* cos = nullptr;            // [seqlen_ro, half] (null: no rotary)
  const void* sin = nullptr;
  DType rotary_dtype = DType::kFloat32;
  int64_t cos_stride[2] = {0, 0}, sin_stride[2] = {0, 0};
  int64_t half = 0;
  bool interleaved = true;
  int64_t q_rows = 0;  // q's rows: batch * seqlen_q, or total_q for a packed q
};
// Options::check_indices: the index values checked on the device (one sync) by the host's
// functions: q's cu_seqlens_q (find_index_fault) into *q_fault, the cache's into *kv_fault.
void find_kvcache_faults(const AttnParams& p, const KvIndices& x, IndexFaultAt* q_fault, KvFault* kv_fault);
// Appends k_new / v_new (rotated) into the cache, rotates q into a workspace, computes each
// sequence's key count (cache_seqlens + new) into another, then forward(p, kernel) over the
// cache. Stream-ordered throughout: no sync, no host read, capturable in a CUDA graph.
void forward_kvcache(AttnParams p, const KvAppend& a, Kernel kernel);

}  // namespace tileattn::detail::cuda
