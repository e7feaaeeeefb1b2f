// backward.cc: runs a validated backward on CUDA tensors: the per-row preprocessing into a
// stream-ordered workspace, then the sm80 dK/dV and dQ kernels (every sm_80+ GPU, Hopper too)
// or, when asked for, the sm90 kernel (dK, dV and fp32 dQ sums in one pass) and dQ's conversion.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "cuda/sm80/sm80.h"
#include "tileattn/tensor.h"
#if defined(TILEATTN_SM90_BACKWARD)
#include "cuda/sm90/bwd.h"
#include "cuda/sm90/bwd_order.h"
#endif

namespace tileattn::detail::cuda {
namespace {

// fp32 scratch allocated on the stream and freed on it when the call ends (stream-ordered, so a
// captured CUDA graph holds its own).
class StreamBuffer {
 public:
  StreamBuffer(int64_t floats, cudaStream_t stream) : stream_(stream) {
    if (floats > 0)
      TILEATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), floats * sizeof(float), stream_));
  }
  ~StreamBuffer() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  float* data() const { return data_; }

 private:
  cudaStream_t stream_;
  float* data_ = nullptr;
};

#if defined(TILEATTN_SM90_BACKWARD)
std::atomic<int64_t> g_sm90_dq_cap{kSm90DqCapBytes};           // bytes of fp32 dQ sums a launch; 0: no cap
std::atomic<int64_t> g_sm90_det_budget{kSm90DetGroupL2Bytes};  // deterministic order's L2 budget

// b for KV heads [h0, h0 + n) and their query heads: every per-head pointer moved to head h0 (of
// k, v, dk, dv) or h0 * group (of q, out, lse, dout, dlse, dq), n KV heads and n * group query
// heads.
BackwardParams kv_head_group(const BackwardParams& b, int64_t h0, int64_t n) {
  BackwardParams c = b;
  AttnParams& p = c.fwd;
  const int64_t group = p.heads_q / p.heads_kv, hq = h0 * group;
  const auto size = static_cast<int64_t>(dtype_size(p.dtype));
  const auto move = [&](const void* ptr, int64_t elems) {
    return ptr == nullptr ? nullptr : static_cast<const char*>(ptr) + elems * size;
  };
  p.q = move(p.q, hq * p.q_stride.h);
  p.k = move(p.k, h0 * p.k_stride.h);
  p.v = move(p.v, h0 * p.v_stride.h);
  p.out = const_cast<char*>(move(p.out, hq * p.out_stride.h));
  if (p.lse) p.lse = static_cast<float*>(p.lse) + hq * p.lse_stride.h;
  c.dout = move(c.dout, hq * c.dout_stride.h);
  if (c.dlse) c.dlse = static_cast<const float*>(c.dlse) + hq * c.dlse_stride.h;
  c.dq = const_cast<char*>(move(c.dq, hq * c.dq_stride.h));
  c.dk = const_cast<char*>(move(c.dk, h0 * c.dk_stride.h));
  c.dv = const_cast<char*>(move(c.dv, h0 * c.dv_stride.h));
  p.heads_q = n * group, p.heads_kv = n;
  return c;
}

// The sm90 backward: the preprocessing, which zeroes dq_accum (and dq_order in deterministic
// mode) in the same pass, the kernel, then dq from dq_accum. Those fp32 sums take 4 x B x Hq x
// Lq x D bytes; with a cap (set_sm90_backward_dq_cap) the KV heads go in groups whose sums fit
// it (one at the least), a launch and a conversion a group, through one buffer.
void backward_sm90(const BackwardParams& b, const sm80::BwdKernelParams& k, cudaStream_t stream) {
  const AttnParams& p = b.fwd;
  const sm90::BwdParams whole = sm90::bwd_params(b, k);
  const int64_t group = p.heads_q / p.heads_kv, tiles_per_kv = group * whole.dq_tiles.head_blocks;
  const int64_t floats_per_kv = tiles_per_kv * whole.dq_tiles.block_m * p.head_dim;
  const int64_t cap = g_sm90_dq_cap.load();
  const int64_t per_launch = sm90::dq_group_heads(cap, floats_per_kv, p.heads_kv);
  const int64_t accum = per_launch * floats_per_kv, orders = b.deterministic ? per_launch * tiles_per_kv : 0;
  const StreamBuffer scratch(accum + orders, stream);  // dq_accum, then the int counters
  for (int64_t h0 = 0; h0 < p.heads_kv; h0 += per_launch) {
    const int64_t n = std::min(per_launch, p.heads_kv - h0);
    const BackwardParams c = per_launch == p.heads_kv ? b : kv_head_group(b, h0, n);
    sm80::BwdKernelParams kc = k;
    if (per_launch != p.heads_kv) {  // the group's preprocessed rows, in the whole call's layout
      kc = sm80::make_bwd_params(c, k.lse2 + h0 * group * k.w_sh, k.dsum + h0 * group * k.w_sh);
      kc.w_sb = k.w_sb, kc.w_sh = k.w_sh;
    }
    sm90::BwdParams kp = sm90::bwd_params(c, kc);
    kp.dq_accum = scratch.data();
    kp.dq_order = orders ? reinterpret_cast<int*>(scratch.data() + accum) : nullptr;
    kp.det_group_log2 = sm90::det_pair_group_log2(group * p.seqlen_q, p.head_dim, kp.batch * kp.heads_kv,
                                                  g_sm90_det_budget.load());  // used without a mask only
    if (h0 == 0)  // the per-row values, and the first group's sums zeroed in the same pass
      sm80::bwd_preprocess(k, p.dtype, stream, scratch.data(), accum + orders);
    else
      TILEATTN_CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, (accum + orders) * sizeof(float), stream));
    sm90::backward(c, kp);
    sm90::dq_from_accum(c, kp);
  }
}
#endif
}  // namespace

// The two knobs: a value <= 0 sets 0 (none); each returns the one it replaced (0 without the
// sm90 backward).
#if defined(TILEATTN_SM90_BACKWARD)
int64_t set_sm90_backward_det_budget(int64_t bytes) {
  return g_sm90_det_budget.exchange(std::max<int64_t>(bytes, 0));
}
int64_t set_sm90_backward_dq_cap(int64_t bytes) {
  return g_sm90_dq_cap.exchange(std::max<int64_t>(bytes, 0));
}
#else
int64_t set_sm90_backward_det_budget(int64_t) { return 0; }
int64_t set_sm90_backward_dq_cap(int64_t) { return 0; }
#endif

void backward(const BackwardParams& b, bool sm90) {
  const AttnParams& p = b.fwd;
  if (p.batch == 0 || p.heads_q == 0) return;  // no gradient element at all
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const int64_t rows = p.part_batch() * p.heads_q * p.part_len();
  const StreamBuffer workspace(2 * rows, stream);  // lse2, then dsum
  const sm80::BwdKernelParams kp = sm80::make_bwd_params(
      b, workspace.data(), workspace.data() == nullptr ? nullptr : workspace.data() + rows);
  if (sm90) {
#if defined(TILEATTN_SM90_BACKWARD)
    backward_sm90(b, kp, stream);  // the preprocessing there, zeroing the dQ sums too
    return;
#else
    throw RuntimeError("this build has no sm90 backward");
#endif
  }
  sm80::bwd_preprocess(kp, p.dtype, p.cuda_stream);
  switch (sm80::bwd_padded_head_dim(p.head_dim)) {
    case 64:
      sm80::backward_hdim<64>(b, kp);
      break;
    case 128:
      sm80::backward_hdim<128>(b, kp);
      break;
    case 256:
      sm80::backward_hdim<256>(b, kp);
      break;
    default:
      throw RuntimeError("sm80 backward: head_dim " + std::to_string(p.head_dim) + " has no kernel");
  }
}

}  // namespace tileattn::detail::cuda
