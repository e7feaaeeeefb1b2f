// cmd_peak.cc: `tileattn peak`: this machine's fp32 FMA peak (the yardstick bench --peak divides by).
#include <cstdio>
#include <memory>

#include "args.h"
#include "commands.h"
#include "fma_peak.h"
#include "machine.h"
#include "table.h"
#include "tileattn/version.h"

namespace tileattn::cli {
namespace {

struct PeakArgs {
  int threads = 0;
  std::string isa;  // "" = the level the library's kernels run at
  int trials = 5;
  double seconds = 0.2;
};

int run_peak(const PeakArgs& a) {
  const int threads = thread_count(a.threads);
  std::vector<const FmaKernel*> kernels;
  if (a.isa == "all") {
    kernels = fma_kernels_available();
  } else {
    const std::string isa = a.isa.empty() ? cpu_isa() : a.isa;
    const FmaKernel* k = fma_kernel(isa);
    if (!k) throw CLI::ValidationError("--isa", isa + " cannot run on this CPU");
    kernels.push_back(k);
  }
  std::printf("tileattn peak: fp32 multiply-add peak of %s, %d %s\n", cpu_model().c_str(), threads,
              threads == 1 ? "thread" : "threads");
  std::printf(
      "each thread runs independent chains acc = acc * m + a in registers; best of %d trials of %.2f s\n\n",
      a.trials, a.seconds);
  Table table({"<isa", "lanes", "chains", "GFLOP/s", "GFLOP/s per thread", "GFLOP/s, wall clock"});
  for (const FmaKernel* k : kernels) {
    const FmaPeak p = measure_fma_peak(*k, threads, a.trials, a.seconds);
    table.add_row({p.isa, std::to_string(p.lanes), std::to_string(p.chains), format("%.1f", p.gflops),
                   format("%.1f", p.gflops / threads), format("%.1f", p.gflops_wall)});
  }
  table.print(stdout);
  std::printf(
      "\nFLOPs = 2 per lane per multiply-add (the generic kernel issues a multiply and an add).\n"
      "GFLOP/s adds each thread's rate over its own CPU time, so other processes on the cores do not\n"
      "lower it; the wall-clock column is what the threads got together, lower when the cores are shared.\n");
  return 0;
}

}  // namespace

Command add_peak(CLI::App& app) {
  auto args = std::make_shared<PeakArgs>();
  CLI::App* sub =
      app.add_subcommand("peak", "Measure this CPU's fp32 FMA peak (GFLOP/s) with a micro-benchmark");
  add_threads_flag(*sub, &args->threads);
  sub->add_option("--isa", args->isa,
                  "avx512, avx2, generic, or all (default: the level the library runs at)")
      ->check(one_of({"avx512", "avx2", "generic", "all"}));
  sub->add_option("--trials", args->trials, "timed trials; the best is kept")
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--seconds", args->seconds, "length of one trial")
      ->check(positive_number())
      ->capture_default_str();
  return {sub, [args] { return run_peak(*args); }};
}

}  // namespace tileattn::cli
