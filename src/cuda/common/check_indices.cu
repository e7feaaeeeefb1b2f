// check_indices.cu: the checked mode (Options::check_indices): a varlen batch's index tensors
// validated on the device by the same function the host uses (common/seqlens_check.h).
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/cuda_api.h"
#include "cuda/device_guard.h"

namespace tileattn::detail::cuda {
namespace {

// One thread: batches are short, and this mode is for tests and debugging.
__global__ void check_kernel(IndexCheck q, IndexCheck k, int64_t batch, IndexFaultAt* faults) {
  int64_t longest;
  faults[0] = find_index_fault(q, batch, &longest);
  faults[1] = find_index_fault(k, batch, &longest);
}

}  // namespace

void find_index_faults(const AttnParams& p, IndexFaultAt host[2]) {
  const Seqs& s = p.seqs;
  host[0] = host[1] = IndexFaultAt{};
  if (!s.cu_q && !s.cu_k && !s.used_q && !s.used_k) return;
  DeviceGuard guard(p.device_index);
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  // The packed row count, or the dense length; a varlen side's maximum is checked too.
  const IndexCheck q{s.cu_q, s.used_q, s.cu_q ? p.total_q : p.seqlen_q, s.cu_q ? p.seqlen_q : -1};
  const IndexCheck k{s.cu_k, s.used_k, s.cu_k ? p.total_k : p.seqlen_k, s.cu_k ? p.seqlen_k : -1};
  IndexFaultAt* faults = nullptr;
  TILEATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&faults), 2 * sizeof(IndexFaultAt), stream));
  check_kernel<<<1, 1, 0, stream>>>(q, k, p.batch, faults);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(host, faults, 2 * sizeof(IndexFaultAt), cudaMemcpyDeviceToHost, stream);
  (void)cudaFreeAsync(faults, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) throw_cuda(err, "find_index_faults", __FILE__, __LINE__);
}

}  // namespace tileattn::detail::cuda
