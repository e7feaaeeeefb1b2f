// cuda_api.h: host entry points of the CUDA part of the library (no CUDA headers here).
// Compiled only when the build has CUDA (TILEATTN_WITH_CUDA).
#pragma once

#include <cstdint>
#include <string>

#include "common/combine.h"
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
// Two device ints for one stream's launches of persistent kernels (their tile counter and a
// count of finished CTAs), allocated on the current device and zeroed on the stream at first
// use, kept for the process. Keyed by the stream's id (cudaStreamGetId), so a per-thread
// default stream is its own. Each launch leaves them at zero when it ends (its last CTA resets
// them), so the next launch on the stream, from any host thread, starts from zero.
int* stream_counter(int device, void* stream);

void forward(const AttnParams& p, Kernel kernel);  // a validated problem on device tensors
void backward(const BackwardParams& b);            // a validated backward on device tensors
void combine(const CombineParams& c);              // split-KV partial states merged (combine.cu)
// Options::check_indices: p's device index tensors checked on the device by the host's checks
// (one sync); faults[0] for the q side, faults[1] for the k side.
void find_index_faults(const AttnParams& p, IndexFaultAt faults[2]);
int64_t eager(const AttnParams& p);  // S and P in device memory; returns their bytes

}  // namespace tileattn::detail::cuda
