// cmd_bench.cc: `tileattn bench`: a sweep over sequence lengths, head dims and causal, per
// implementation: median time, GFLOP/s, tiled/eager, optionally % of the measured FMA peak; JSON out.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.h"
#include "commands.h"
#include "fma_peak.h"
#include "machine.h"
#include "problem.h"
#include "table.h"
#include "tileattn/version.h"

namespace tileattn::cli {
namespace {

struct BenchArgs {
  std::vector<int64_t> seqlens = {512, 1024, 2048};
  std::vector<int64_t> head_dims = {64, 128};
  std::string causal = "both";
  std::vector<std::string> impls = {"tiled", "eager"};
  int64_t batch = 1, heads = 8, kv_heads = 0;
  std::string dtype, device = "auto", out, commit, kernel = "auto";
  int reps = 0, warmup = -1, threads = 0;  // 0 and -1: per device (see add_bench)
  bool peak = false, backward = false;
  std::string lse = "on";
};

struct Measurement {
  Impl impl = Impl::kTiled;
  int64_t seqlen = 0, head_dim = 0;
  bool causal = false;
  std::string status = "ok";  // "ok", "skipped: ...", "failed: ..."
  Timing timing;
  double gflops = 0;
};

std::optional<Measurement> find(const std::vector<Measurement>& rows, Impl impl) {
  for (const auto& m : rows)
    if (m.impl == impl) return m;
  return std::nullopt;
}

int run_bench(const BenchArgs& a) {
  const Device device = resolve_device(a.device);
  const DType dtype = resolve_dtype(a.dtype, device);
  const int threads = thread_count(a.threads);
  // A GPU call is short: more calls steady the median, and clocks need a few to ramp up
  // (100 after 10 is the GPU benchmarks' rule).
  const bool on_cpu = device.kind == DeviceKind::kCPU;
  const int reps = a.reps > 0 ? a.reps : on_cpu ? 3 : 100;
  const int warmup = a.warmup >= 0 ? a.warmup : on_cpu ? 1 : 10;
  std::vector<bool> causal_modes;
  if (a.causal != "on") causal_modes.push_back(false);
  if (a.causal != "off") causal_modes.push_back(true);
  std::vector<Impl> impls;
  for (const auto& name : a.impls) {
    const Impl impl = name == "tiled" ? Impl::kTiled : Impl::kEager;
    if (std::find(impls.begin(), impls.end(), impl) != impls.end())
      throw CLI::ValidationError("--impl", name + " is listed twice");
    impls.push_back(impl);
  }
  const Kernel kernel = parse_kernel(a.kernel);
  if (a.backward && a.lse == "off")
    throw CLI::ValidationError("--lse", "off: the backward reads the LSE its forward computes; drop --lse");
  if (a.backward && !on_cpu && impls == std::vector<Impl>{Impl::kEager})
    throw CLI::ValidationError("--impl",
                               "eager: the eager backward runs on the CPU; add tiled or use --device cpu");

  std::optional<FmaPeak> peak;
  if (a.peak) {
    if (device.kind != DeviceKind::kCPU)
      throw CLI::ValidationError("--peak", "measures the CPU; drop it with --device cuda");
    std::fprintf(stderr, "measuring the FMA peak ...\n");
    if (const FmaKernel* k = fma_kernel(cpu_isa())) peak = measure_fma_peak(*k, threads);
  }

  std::printf("tileattn bench%s: B=%lld Hq=%lld Hkv=%lld %s, LSE %s; median of %d calls after %d warm-up%s\n",
              a.backward ? " --backward" : "", static_cast<long long>(a.batch),
              static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads > 0 ? a.kv_heads : a.heads),
              dtype_name(dtype), a.backward ? "on" : a.lse.c_str(), reps, warmup,
              on_cpu ? "" : " (L2 flushed before each, no wait between calls)");
  std::printf("device %s\n", describe_device(device, threads).c_str());
  if (peak)
    std::printf("FMA peak %.1f GFLOP/s (%s, %d threads; tileattn peak)\n", peak->gflops, peak->isa.c_str(),
                threads);
  // A GPU's rates read better in TFLOP/s; the JSON keeps GFLOP/s either way.
  const bool tera = device.kind == DeviceKind::kCUDA;
  const char* unit = tera ? "TFLOP/s" : "GFLOP/s";
  std::printf("%s counts 4*B*Hq*Lq*Lk*D FLOPs, halved when causal%s\n\n", unit,
              a.backward ? "; the backward 2.5x that (backward() alone, after one forward())" : "");

  std::vector<std::string> headers = {"D", "L", "causal"};
  for (Impl impl : impls) {
    headers.push_back(std::string(impl_name(impl)) + " time");
    headers.push_back(std::string(impl_name(impl)) + " " + unit);
    if (peak) headers.push_back(std::string(impl_name(impl)) + " %peak");
  }
  const bool both = impls.size() == 2;
  if (both) headers.push_back("tiled/eager");
  Table table(headers);

  std::vector<Measurement> all;
  const size_t total = a.head_dims.size() * a.seqlens.size() * causal_modes.size() * impls.size();
  size_t done = 0;
  for (int64_t D : a.head_dims)
    for (int64_t L : a.seqlens) {
      const Shape shape{a.batch, a.heads, a.kv_heads > 0 ? a.kv_heads : a.heads, L, L, D};
      AttentionData data(shape, dtype, device, 0);
      std::optional<GradBuffers> grads;
      if (a.backward) grads.emplace(data, 0);
      for (bool causal : causal_modes) {
        Options options;
        options.causal = causal;
        options.num_threads = a.threads;
        options.kernel = kernel;  // the tiled path's kernel (eager ignores it)
        std::vector<Measurement> rows;
        for (Impl impl : impls) {
          Measurement m;
          m.impl = impl;
          m.seqlen = L;
          m.head_dim = D;
          m.causal = causal;
          std::fprintf(stderr, "[%zu/%zu] %s D=%lld L=%lld causal=%s ... ", ++done, total, impl_name(impl),
                       static_cast<long long>(D), static_cast<long long>(L), causal ? "on" : "off");
          std::optional<std::string> skip;
          if (impl == Impl::kEager)
            skip = !a.backward ? eager_wont_fit(shape, dtype, device)
                   : on_cpu    ? eager_backward_wont_fit(shape)
                               : std::optional<std::string>("the eager backward runs on the CPU");
          if (skip) {
            m.status = "skipped: " + *skip;
          } else {
            try {
              m.timing = a.backward ? time_backward(impl, data, *grads, options, warmup, reps)
                                    : time_impl(impl, data, options, warmup, reps, a.lse == "on");
              m.gflops =
                  (a.backward ? 2.5 : 1.0) * attention_flops(shape, causal) / (m.timing.median() * 1e6);
            } catch (const Error&) {
              throw;  // bad input: the same for every row, so stop with the library's message
            } catch (const std::exception& e) {
              m.status = std::string("failed: ") + e.what();
            }
          }
          std::fprintf(stderr, "%s\n",
                       m.status == "ok" ? format_ms(m.timing.median()).c_str() : m.status.c_str());
          rows.push_back(m);
          all.push_back(m);
        }
        std::vector<std::string> cells = {std::to_string(D), std::to_string(L), causal ? "on" : "off"};
        for (const auto& m : rows) {
          const bool ok = m.status == "ok";
          cells.push_back(ok ? format_ms(m.timing.median()) : m.status.substr(0, m.status.find(':')));
          cells.push_back(ok ? format("%.1f", tera ? m.gflops * 1e-3 : m.gflops) : "-");
          if (peak) cells.push_back(ok ? format("%.1f%%", 100 * m.gflops / peak->gflops) : "-");
        }
        if (both) {
          const auto t = find(rows, Impl::kTiled), e = find(rows, Impl::kEager);
          cells.push_back(t->status == "ok" && e->status == "ok" ? format("%.2fx", t->gflops / e->gflops)
                                                                 : "-");
        }
        table.add_row(cells);
      }
    }
  table.print(stdout);
  if (both) std::printf("\ntiled/eager: tiled FLOP/s over eager FLOP/s (= eager time / tiled time)\n");

  if (!a.out.empty()) {
    nlohmann::json doc;
    doc["tool"] = "tileattn bench";
    doc["version"] = version();
    doc["date"] = utc_date_time();
    const std::string commit = git_commit(a.commit);
    doc["commit"] = commit.empty() ? nlohmann::json() : nlohmann::json(commit);
    doc["machine"] = {{"cpu_model", cpu_model()},
                      {"cpu_isa", cpu_isa()},
                      {"threads", threads},
                      {"device", device_name(device)},
                      {"device_description", describe_device(device, threads)}};
    doc["machine"]["fma_peak_gflops"] = peak ? nlohmann::json(peak->gflops) : nlohmann::json();
    doc["config"] = {{"batch", a.batch},
                     {"heads_q", a.heads},
                     {"heads_kv", a.kv_heads > 0 ? a.kv_heads : a.heads},
                     {"dtype", dtype_name(dtype)},
                     {"kernel", a.kernel},
                     {"reps", reps},
                     {"warmup", warmup},
                     {"lse", a.lse == "on"},
                     {"pass", a.backward ? "backward" : "forward"},
                     {"timer", on_cpu ? "steady_clock around each call"
                                      : "CUDA events around each call, L2 flushed (256 MiB zeroed) before "
                                        "each, no wait between calls; median"},
                     {"flops", a.backward ? "2.5 * 4*B*Hq*Lq*Lk*D, halved when causal (backward)"
                                          : "4*B*Hq*Lq*Lk*D, halved when causal"}};
    doc["rows"] = nlohmann::json::array();
    for (const auto& m : all) {
      nlohmann::json row = {{"impl", impl_name(m.impl)}, {"seqlen_q", m.seqlen}, {"seqlen_k", m.seqlen},
                            {"head_dim", m.head_dim},    {"causal", m.causal},   {"status", m.status},
                            {"times_ms", m.timing.ms}};
      if (m.status == "ok") {
        row["median_ms"] = m.timing.median();
        row["min_ms"] = m.timing.min();
        row["gflops"] = m.gflops;
        if (peak) row["fraction_of_peak"] = m.gflops / peak->gflops;
      }
      doc["rows"].push_back(row);
    }
    std::ofstream file(a.out);
    file << doc.dump(2) << "\n";
    if (!file) throw RuntimeError("--out: cannot write " + a.out);
    std::fprintf(stderr, "wrote %s\n", a.out.c_str());
  }
  int status = 0;
  for (const auto& m : all)
    if (m.status.rfind("failed", 0) == 0) status = 1;
  return status;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub =
      app.add_subcommand("bench", "Sweep lengths, head dims and masks: time and GFLOP/s per implementation");
  sub->add_option("--seqlens", args->seqlens, "sequence lengths (Lq = Lk), comma-separated")
      ->delimiter(',')
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--head-dims", args->head_dims, "head dimensions, comma-separated")
      ->delimiter(',')
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--causal", args->causal, "off, on or both")
      ->check(one_of({"off", "on", "both"}))
      ->capture_default_str();
  sub->add_option("--impl", args->impls, "implementations, comma-separated: tiled, eager")
      ->delimiter(',')
      ->check(one_of({"tiled", "eager"}))
      ->capture_default_str();
  sub->add_option("--batch", args->batch, "batch size B")->check(positive_int())->capture_default_str();
  sub->add_option("--heads", args->heads, "query heads Hq")->check(positive_int())->capture_default_str();
  sub->add_option("--kv-heads", args->kv_heads, "key/value heads (default: --heads)")->check(positive_int());
  add_dtype_flag(*sub, &args->dtype, "fp32, fp16 or bf16 (default: fp32 on the CPU, bf16 on a GPU)");
  add_device_flag(*sub, &args->device, true);
  add_kernel_flag(*sub, &args->kernel);
  add_threads_flag(*sub, &args->threads);
  sub->add_option("--lse", args->lse, "compute the LSE too (on) or O alone (off)")
      ->check(one_of({"on", "off"}))
      ->capture_default_str();
  sub->add_option("--reps", args->reps, "timed calls per row, the median is shown (default: 3 CPU, 100 GPU)")
      ->check(positive_int());
  sub->add_option("--warmup", args->warmup, "untimed calls before timing (default: 1 CPU, 10 GPU)")
      ->check(non_negative_int());
  sub->add_flag("--peak", args->peak, "measure the FMA peak first and show % of it (CPU)");
  sub->add_flag("--backward", args->backward,
                "time backward() (eager: eager_backward(), CPU) after one forward(), 2.5x its FLOPs");
  sub->add_option("--out", args->out, "write the results as JSON to this file");
  sub->add_option("--commit", args->commit, "git commit to record in the JSON (default: $TILEATTN_COMMIT)");
  return {sub, [args] { return run_bench(*args); }};
}

}  // namespace tileattn::cli
