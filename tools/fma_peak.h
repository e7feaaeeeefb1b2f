// fma_peak.h: this machine's fp32 multiply-add peak, measured with independent FMA chains per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tileattn::cli {

// One instruction set's kernel: `chains` independent accumulators of `lanes` floats, each
// updated acc = acc * mul + add per iteration (one FMA, or a multiply and an add on "generic").
struct FmaKernel {
  const char* isa;  // "avx512", "avx2", "generic" (the names cpu_isa() uses)
  int lanes;
  int chains;
  float (*run)(int64_t iterations, float mul, float add);  // returns a sum, so nothing is dead
};

// Kernels this CPU can run, best first.
std::vector<const FmaKernel*> fma_kernels_available();
// The kernel for an ISA name, or null when unknown or this CPU cannot run it.
const FmaKernel* fma_kernel(const std::string& isa);

struct FmaPeak {
  std::string isa;
  int lanes = 0;
  int chains = 0;
  // All threads together, best trial; 2 FLOPs per lane per FMA. Each thread's rate is taken over
  // its own CPU time, so other processes sharing the cores do not lower it (but more threads
  // than logical CPUs would overstate it).
  double gflops = 0;
  double gflops_wall = 0;  // the same over wall-clock time: lower whenever the cores are shared
};

// Runs the kernel on `threads` threads at once for `trials` trials of about `seconds` each and
// keeps the best trial.
FmaPeak measure_fma_peak(const FmaKernel& kernel, int threads, int trials = 5, double seconds = 0.2);

}  // namespace tileattn::cli
