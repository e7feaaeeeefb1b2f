// cmd_demo.cc: `tileattn demo`: standard (eager) against tiled attention on this machine, in one table:
// time, throughput, extra memory (model and measured), error against the fp64 oracle, traffic model.
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>

#include "accuracy.h"
#include "args.h"
#include "commands.h"
#include "gpu_runtime.h"
#include "io_model.h"
#include "machine.h"
#include "memory_probe.h"
#include "problem.h"
#include "table.h"

namespace tileattn::cli {
namespace {

// The oracle checks 8 runs of 8 query rows spread over L (first and last rows included) in every
// head: 64 rows keep the fp64 pass to a second or two at L = 2048 while touching both edge tiles.
constexpr int64_t kSampleRanges = 8;
constexpr int64_t kSampleRowsPerRange = 8;

// Timed calls per path: a CPU call takes about a second here, a GPU call a fraction of a
// millisecond, where 20 calls steady the median at no cost. The GPU also gets two more warm-up
// calls (clocks ramp up, the first cuBLAS call sets up its handle).
constexpr int kCpuReps = 3;
constexpr int kGpuReps = 20;
constexpr int kGpuExtraWarmup = 2;

struct DemoArgs {
  int64_t batch = 1, heads = 32, kv_heads = 0, seqlen = 2048, head_dim = 128;
  std::string dtype, device = "auto";
  bool causal = false;
  int reps = 0, threads = 0;  // reps 0: kCpuReps or kGpuReps
  int64_t seed = 0;
};

struct PathResult {
  Impl impl = Impl::kTiled;
  bool ran = false;
  std::string error;             // why it failed or was skipped
  std::exception_ptr bad_input;  // set when the library rejected the input (tileattn::Error)
  Timing timing;
  int64_t model_extra = -1;     // bytes; -1 when there is no model
  int64_t measured_extra = -1;  // bytes; -1 when not measured
  Errors errors;
};

// One path: a first call (untimed warm-up, measured for memory, checked against the oracle), then
// `reps` timed calls.
PathResult run_path(Impl impl, AttentionData& data, const Options& options, const Oracle& oracle, int reps,
                    int threads) {
  PathResult r;
  r.impl = impl;
  const bool on_cpu = data.device().kind == DeviceKind::kCPU;
  try {
    if (impl == Impl::kEager)
      if (auto why = eager_wont_fit(data.shape(), data.dtype(), data.device())) {
        r.error = "skipped: " + *why;
        return r;
      }
    data.poison_outputs();
    EagerStats stats;
    auto first_call = [&] { run_impl(impl, data, options, &stats); };
    if (on_cpu) {
      r.measured_extra = peak_rss_growth(first_call);
    } else {
      first_call();
      gpu::synchronize(data.device().index);
    }
    r.errors = compare_to_oracle(oracle, data.shape(), data.out_on_host(), data.lse_on_host());
    r.timing = time_impl(impl, data, options, on_cpu ? 0 : kGpuExtraWarmup, reps);
    if (impl == Impl::kEager)
      r.model_extra = stats.extra_bytes;
    else if (on_cpu && !cpu_bf16_pairs(data.dtype(), data.shape().head_dim))
      r.model_extra = tiled_workspace_bytes(threads, cpu_tiles(data.shape(), threads), data.shape().head_dim);
    r.ran = true;
  } catch (const Error& e) {
    r.error = e.what();
    r.bad_input = std::current_exception();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

std::string ratio_text(double standard, double tiled, const char* better, const char* worse) {
  if (!(standard > 0) || !(tiled > 0)) return "";
  const double x = standard / tiled;
  const double shown = x >= 1 ? x : 1 / x;
  return format(shown >= 100 ? "%.0fx %s" : "%.2fx %s", shown, x >= 1 ? better : worse);
}

int run_demo(const DemoArgs& a) {
  const Device device = resolve_device(a.device);
  const DType dtype = resolve_dtype(a.dtype, device);
  const bool on_cpu = device.kind == DeviceKind::kCPU;
  const int threads = thread_count(a.threads);
  const int reps = a.reps > 0 ? a.reps : on_cpu ? kCpuReps : kGpuReps;
  const Shape shape{a.batch, a.heads, a.kv_heads > 0 ? a.kv_heads : a.heads, a.seqlen, a.seqlen, a.head_dim};
  Options options;
  options.causal = a.causal;
  options.num_threads = a.threads;

  std::printf(
      "tileattn demo: standard attention (S and P in memory) vs tiled (FlashAttention), both exact\n");
  std::printf("problem  %s %s, %s, scale 1/sqrt(D)\n", shape_summary(shape).c_str(), dtype_name(dtype),
              a.causal ? "causal" : "not causal");
  std::printf("device   %s\n", describe_device(device, threads).c_str());
  const double flops = attention_flops(shape, a.causal);
  std::printf("work     %.1f GFLOP per call (4*B*H*L*L*D%s); median of %d timed calls after %d warm-up\n\n",
              flops * 1e-9, a.causal ? ", halved for causal" : "", reps, on_cpu ? 1 : 1 + kGpuExtraWarmup);
  std::fflush(stdout);

  AttentionData data(shape, dtype, device, static_cast<uint64_t>(a.seed));
  const Oracle oracle =
      run_oracle(data, options, spread_rows(shape.seqlen_q, kSampleRanges, kSampleRowsPerRange));
  int64_t sampled_rows = 0;
  for (const RowRange& r : oracle.rows) sampled_rows += r.end - r.begin;

  // Tiled first: eager's gigabyte of S and P goes back to the OS when freed, but the small
  // blocks its threads allocate could hide the tiled path's own scratch from the RSS probe.
  const PathResult tiled = run_path(Impl::kTiled, data, options, oracle, reps, threads);
  const PathResult standard = run_path(Impl::kEager, data, options, oracle, reps, threads);
  // Both rejected the same input: a usage error, reported as the library phrased it.
  if (tiled.bad_input && standard.bad_input) std::rethrow_exception(tiled.bad_input);

  // The model uses the tiles of the kernel that ran (the library says which).
  const TensorRef lse_ref = data.lse();
  const Kernel kernel = supported(data.q(), data.k(), data.v(), data.out(), &lse_ref, options).kernel;
  const Tiles tiles = on_cpu ? cpu_tiles(shape, threads) : gpu_tiles(shape, kernel);
  const Traffic eager_io = eager_traffic(shape, dtype);
  const Traffic tiled_io = tiled_traffic(shape, dtype, a.causal, tiles);
  const Traffic tiled_floor = tiled_traffic_kv_once(shape, dtype);

  auto cell = [](const PathResult& r, const std::string& text) {
    if (r.ran) return text;
    return std::string(r.error.rfind("skipped", 0) == 0 ? "skipped" : "failed");
  };
  auto bytes_cell = [&](const PathResult& r, int64_t bytes) {
    return cell(r, bytes < 0 ? "n/a" : format_bytes(bytes));
  };
  auto gflops = [&](const PathResult& r) {
    const double gflops = flops / (r.timing.median() * 1e6);
    return on_cpu ? format("%.1f GFLOP/s", gflops) : format("%.1f TFLOP/s", gflops * 1e-3);
  };
  auto both = [&](const PathResult& x) { return x.ran; };

  Table table({"<", "standard (eager)", "tiled", "tiled vs standard"});
  table.add_row({format("time, median of %d", reps), cell(standard, format_ms(standard.timing.median())),
                 cell(tiled, format_ms(tiled.timing.median())),
                 both(standard) && both(tiled)
                     ? ratio_text(standard.timing.median(), tiled.timing.median(), "faster", "slower")
                     : ""});
  table.add_row({"throughput", cell(standard, gflops(standard)), cell(tiled, gflops(tiled)), ""});
  table.add_row({"extra memory, model (a)", bytes_cell(standard, standard.model_extra),
                 bytes_cell(tiled, tiled.model_extra),
                 both(standard) && both(tiled)
                     ? ratio_text(static_cast<double>(standard.model_extra),
                                  static_cast<double>(tiled.model_extra), "less", "more")
                     : ""});
  table.add_row({"extra memory, measured (b)", bytes_cell(standard, standard.measured_extra),
                 bytes_cell(tiled, tiled.measured_extra), ""});
  table.add_row({"max |O - fp64 oracle| (c)", cell(standard, format_error(standard.errors.out)),
                 cell(tiled, format_error(tiled.errors.out)), ""});
  table.add_row({"max |LSE - fp64 oracle| (c)", cell(standard, format_error(standard.errors.lse)),
                 cell(tiled, format_error(tiled.errors.lse)), ""});
  table.add_row({"memory traffic, model (d)", format_bytes(eager_io.total()), format_bytes(tiled_io.total()),
                 ratio_text(static_cast<double>(eager_io.total()), static_cast<double>(tiled_io.total()),
                            "less", "more")});
  table.add_row({"memory traffic, K/V once (e)", format_bytes(eager_io.total()),
                 format_bytes(tiled_floor.total()),
                 ratio_text(static_cast<double>(eager_io.total()), static_cast<double>(tiled_floor.total()),
                            "less", "more")});
  table.print(stdout);

  std::printf(
      "\n(a) standard: S and P, B*H*L*L elements each, as eager() reports them (EagerStats::extra_bytes).\n");
  if (on_cpu && cpu_bf16_pairs(dtype, shape.head_dim))
    std::printf(
        "    tiled: n/a for bf16 on AMX tiles, whose kernel takes larger tiles and one packed copy of\n"
        "    K and V for all threads (docs/cpu.md); (b) shows what it used.\n");
  else if (on_cpu)
    std::printf(
        "    tiled: the CPU kernel's scratch, threads x (Br*D + D*Bc + Bc*D + Br*Bc + Br*D) fp32,\n"
        "    Br = %lld, Bc = %lld (the kernel's tiles for this shape), %d threads (a formula).\n",
        static_cast<long long>(tiles.block_q), static_cast<long long>(tiles.block_k), threads);
  else
    std::printf(
        "    tiled: n/a; the GPU kernel keeps its tiles on chip (no global-memory workspace modeled).\n");
  if (on_cpu)
    std::printf(
        "(b) peak resident memory added during the first call: VmHWM after the call minus VmRSS before,\n"
        "    the peak mark reset first (/proc/self/clear_refs); counts pages touched, at 4 KiB grain;\n"
        "    %s\n",
        tiled.measured_extra == 0 ? "0 B: the tiled scratch fit in memory the process already held."
                                  : "small blocks can come from memory the process already held.");
  else
    std::printf("(b) not measured on the GPU.\n");
  std::printf(
      "(c) %lld query rows of every batch and head (%lld runs of %lld spread over L, first and last\n"
      "    included), against the fp64 oracle on the same %s inputs.\n",
      static_cast<long long>(sampled_rows), static_cast<long long>(oracle.rows.size()),
      static_cast<long long>(oracle.rows.empty() ? 0 : oracle.rows[0].end - oracle.rows[0].begin),
      dtype_name(dtype));
  std::printf(
      "(d) bytes read + written by the io model with Br = %lld, Bc = %lld (tileattn io,\n"
      "    docs/io_model.md); no cache reuse counted.\n",
      static_cast<long long>(tiles.block_q), static_cast<long long>(tiles.block_k));
  std::printf(
      "(e) the same with each head's K and V read once (they stay in cache across its query tiles);\n"
      "    S and P still count in full (eager writes each whole before reading it back).\n");

  int status = 0;
  for (const PathResult* r : {&standard, &tiled})
    if (!r->ran) {
      std::fprintf(stderr, "tileattn: demo: %s: %s\n", r->impl == Impl::kTiled ? "tiled" : "standard",
                   r->error.c_str());
      if (r->error.rfind("skipped", 0) != 0) status = 1;
    } else if (r->errors.out_nan || r->errors.lse_nan || r->errors.lse_inf_mismatch) {
      std::fprintf(stderr, "tileattn: demo: %s: %lld NaN outputs, %lld LSE NaN, %lld LSE -inf mismatches\n",
                   r->impl == Impl::kTiled ? "tiled" : "standard", static_cast<long long>(r->errors.out_nan),
                   static_cast<long long>(r->errors.lse_nan),
                   static_cast<long long>(r->errors.lse_inf_mismatch));
      status = 1;
    }
  return status;
}

}  // namespace

Command add_demo(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* sub =
      app.add_subcommand("demo", "Standard (eager) vs tiled attention on this machine: time, memory, error");
  sub->add_option("--batch", args->batch, "batch size B")->check(positive_int())->capture_default_str();
  sub->add_option("--heads", args->heads, "query heads H")->check(positive_int())->capture_default_str();
  sub->add_option("--kv-heads", args->kv_heads, "key/value heads (default: --heads)")->check(positive_int());
  sub->add_option("--seqlen", args->seqlen, "sequence length L (queries and keys)")
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--head-dim", args->head_dim, "head dimension D")
      ->check(positive_int())
      ->capture_default_str();
  add_dtype_flag(*sub, &args->dtype, "fp32, fp16 or bf16 (default: fp32 on the CPU, bf16 on a GPU)");
  sub->add_flag("--causal", args->causal, "causal mask");
  sub->add_option("--reps", args->reps,
                  "timed calls per path, the median is shown (default: 3 on the CPU, 20 on a GPU)")
      ->check(positive_int());
  add_threads_flag(*sub, &args->threads);
  add_device_flag(*sub, &args->device, true);
  sub->add_option("--seed", args->seed, "seed of the random inputs")
      ->check(non_negative_int())
      ->capture_default_str();
  return {sub, [args] { return run_demo(*args); }};
}

}  // namespace tileattn::cli
