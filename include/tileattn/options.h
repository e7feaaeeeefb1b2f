// tileattn/options.h: what to compute (scale, masks, softcap) and how (kernel, threads, stream).
#pragma once

#include <cstdint>
#include <optional>

namespace tileattn {

// How the running output is rescaled when a row's max grows (both are exact).
enum class Rescale {
  kConditional,  // FA4: keep the old base while the max grows by less than 2^8 (the default)
  kAlways,       // textbook online softmax: rescale on every new max
};

// Which implementation runs. kAuto picks the fastest one that supports the problem.
enum class Kernel { kAuto, kCpuTiled, kCudaSm80, kCudaSm90 };

struct Options {
  std::optional<float> scale;  // default 1/sqrt(D)
  bool causal = false;         // bottom-right aligned: query i sees keys j <= i + (Lk - Lq)
  int64_t window_left = -1;    // keys j >= i + (Lk - Lq) - window_left; -1 = unbounded
  int64_t window_right = -1;   // keys j <= i + (Lk - Lq) + window_right; -1 = unbounded
  float softcap = 0.0f;        // S = softcap * tanh(S / softcap) when > 0

  // Split-KV (decoding: few query tiles against long keys): each query tile's keys are cut into
  // this many splits, whose partial results are merged exactly (combine()). 0 = chosen from the
  // problem (more splits only where the tiles would leave the GPU's SMs or the CPU's threads
  // idle and the keys are long); N >= 1 forces N (at most kMaxSplits). Results agree within
  // rounding for every count.
  int num_splits = 0;
  // CUDA: validate index tensors that live on the device (cu_seqlens, seqused) before running,
  // at the cost of a synchronization; bad values then raise an Error naming the tensor and
  // entry instead of running on them. CPU index tensors are always validated.
  bool check_indices = false;
  // backward(): the same bits on every run (a fixed order for every gradient sum). The CPU
  // backward is deterministic whatever this says.
  bool deterministic = false;

  Kernel kernel = Kernel::kAuto;
  Rescale rescale = Rescale::kConditional;
  int num_threads = 0;          // CPU threads; 0 = OpenMP's default. Results do not depend on it.
  void* cuda_stream = nullptr;  // a cudaStream_t; nullptr = the legacy default stream
};

inline constexpr int kMaxSplits = 256;

const char* kernel_name(Kernel kernel);  // "auto", "cpu", "sm80", "sm90"

}  // namespace tileattn
