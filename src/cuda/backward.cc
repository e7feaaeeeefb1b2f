// backward.cc: runs a validated backward on CUDA tensors: the per-row preprocessing into a
// stream-ordered workspace, then the sm80 dK/dV and dQ kernels (every sm_80+ GPU, Hopper too).
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"
#include "cuda/sm80/sm80.h"

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

}  // namespace

void backward(const BackwardParams& b) {
  const AttnParams& p = b.fwd;
  if (p.batch == 0 || p.heads_q == 0) return;  // no gradient element at all
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  const int64_t rows = p.part_batch() * p.heads_q * p.part_len();
  const StreamBuffer workspace(2 * rows, stream);  // lse2, then dsum
  const sm80::BwdKernelParams kp = sm80::make_bwd_params(
      b, workspace.data(), workspace.data() == nullptr ? nullptr : workspace.data() + rows);
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
