// fma_peak.cc: picks the FMA kernel for this CPU and times it on every thread at once.
#include "fma_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

namespace tileattn::cli {
namespace fma_avx512 {
extern const FmaKernel kKernel;
}
namespace fma_avx2 {
extern const FmaKernel kKernel;
}
namespace fma_generic {
extern const FmaKernel kKernel;
}

namespace {

bool cpu_runs(const FmaKernel& k) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!std::strcmp(k.isa, "avx512"))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  if (!std::strcmp(k.isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return !std::strcmp(k.isa, "generic");
}

struct TrialRates {
  double cpu_time = 0;  // sum over threads of iterations / that thread's CPU seconds
  double wall = 0;      // threads * iterations / wall seconds
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One trial: `threads` threads each run `iterations`; the volatile sink keeps the results live.
TrialRates run_trial(const FmaKernel& k, int threads, int64_t iterations) {
  [[maybe_unused]] static volatile float sink;
  double cpu_rate = 0;
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : cpu_rate)
  {
    // mul depends on the thread id, so the compiler cannot precompute anything.
    const float mul = 0.999f + 1e-6f * static_cast<float>(omp_get_thread_num());
    const double t0 = thread_cpu_seconds();
    sink = k.run(iterations, mul, 1e-3f);
    cpu_rate += static_cast<double>(iterations) / std::max(thread_cpu_seconds() - t0, 1e-9);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {cpu_rate, static_cast<double>(threads) * static_cast<double>(iterations) / wall};
}

}  // namespace

std::vector<const FmaKernel*> fma_kernels_available() {
  std::vector<const FmaKernel*> out;
  for (const FmaKernel* k : {&fma_avx512::kKernel, &fma_avx2::kKernel, &fma_generic::kKernel})
    if (cpu_runs(*k)) out.push_back(k);
  return out;
}

const FmaKernel* fma_kernel(const std::string& isa) {
  // The library's "avx512bf16" and "amx" levels (bf16 dot products, bf16 tiles besides AVX-512)
  // have AVX-512's fp32 FMAs.
  const std::string fma_isa = isa == "avx512bf16" || isa == "amx" ? "avx512" : isa;
  for (const FmaKernel* k : fma_kernels_available())
    if (fma_isa == k->isa) return k;
  return nullptr;
}

FmaPeak measure_fma_peak(const FmaKernel& k, int threads, int trials, double seconds) {
  // Calibrate: grow the iteration count until one run takes a tenth of the target, then scale.
  // Calibrate on one thread's CPU-time rate (iterations per second).
  int64_t iterations = 1 << 14;
  TrialRates r = run_trial(k, threads, iterations);
  while (static_cast<double>(iterations) * threads / r.cpu_time < seconds / 10) {
    iterations *= 4;
    r = run_trial(k, threads, iterations);
  }
  iterations = std::max<int64_t>(1, static_cast<int64_t>(seconds * r.cpu_time / threads));

  TrialRates best;
  for (int i = 0; i < trials; ++i) {
    r = run_trial(k, threads, iterations);
    best.cpu_time = std::max(best.cpu_time, r.cpu_time);
    best.wall = std::max(best.wall, r.wall);
  }
  const double flops_per_iteration = 2.0 * k.lanes * k.chains;
  FmaPeak peak{k.isa, k.lanes, k.chains};
  peak.gflops = flops_per_iteration * best.cpu_time * 1e-9;
  peak.gflops_wall = flops_per_iteration * best.wall * 1e-9;
  return peak;
}

}  // namespace tileattn::cli
