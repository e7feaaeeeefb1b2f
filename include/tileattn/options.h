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

  Kernel kernel = Kernel::kAuto;
  Rescale rescale = Rescale::kConditional;
  int num_threads = 0;             // CPU threads; 0 = OpenMP's default. Results do not depend on it.
  void* cuda_stream = nullptr;     // a cudaStream_t; nullptr = the legacy default stream
};

const char* kernel_name(Kernel kernel);  // "auto", "cpu", "sm80", "sm90"

}  // namespace tileattn
