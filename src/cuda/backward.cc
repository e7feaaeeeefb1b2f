// backward.cc: runs a validated backward on CUDA tensors: the per-row preprocessing into a
// stream-ordered workspace, then the sm80 dK/dV and dQ kernels (every sm_80+ GPU, Hopper too)
// or, when asked for, the sm90 kernel (dK, dV and fp32 dQ sums in one pass) and dQ's conversion.
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "cuda/sm80/sm80.h"
#if defined(TILEATTN_SM90_BACKWARD)
#include "cuda/sm90/bwd.h"
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
// The sm90 backward: dq_accum (and dq_order in deterministic mode) zeroed on the stream, the
// kernel, then dq from dq_accum.
void backward_sm90(const BackwardParams& b, const sm80::BwdKernelParams& k, cudaStream_t stream) {
  sm90::BwdParams kp = sm90::bwd_params(b, k);
  const int64_t tiles = b.fwd.heads_q * kp.dq_tiles.head_blocks;
  const int64_t accum = tiles * kp.dq_tiles.block_m * b.fwd.head_dim, orders = b.deterministic ? tiles : 0;
  const StreamBuffer scratch(accum + orders, stream);  // dq_accum, then the int counters
  kp.dq_accum = scratch.data();
  kp.dq_order = orders ? reinterpret_cast<int*>(scratch.data() + accum) : nullptr;
  TILEATTN_CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, (accum + orders) * sizeof(float), stream));
  sm90::backward(b, kp);
  sm90::dq_from_accum(b, kp);
}
#endif

}  // namespace

void backward(const BackwardParams& b, bool sm90) {
  const AttnParams& p = b.fwd;
  if (p.batch == 0 || p.heads_q == 0) return;  // no gradient element at all
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const int64_t rows = p.part_batch() * p.heads_q * p.part_len();
  const StreamBuffer workspace(2 * rows, stream);  // lse2, then dsum
  const sm80::BwdKernelParams kp = sm80::make_bwd_params(
      b, workspace.data(), workspace.data() == nullptr ? nullptr : workspace.data() + rows);
  sm80::bwd_preprocess(kp, p.dtype, p.cuda_stream);
  if (sm90) {
#if defined(TILEATTN_SM90_BACKWARD)
    backward_sm90(b, kp, stream);
    return;
#else
    throw RuntimeError("this build has no sm90 backward");
#endif
  }
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
