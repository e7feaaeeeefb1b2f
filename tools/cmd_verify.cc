// cmd_verify.cc: `tileattn verify`: forward() against eager and the fp64 oracle on random inputs
// (--backward: cmd_verify_backward.cc).
// Pass: every output written, -inf LSE rows exactly where the oracle has them, and for O and LSE
//   err(forward) <= 2 * err(eager) + atol   (err = max |x - oracle|)
// plus, in fp32, err(forward) <= kFp32Cap: in fp32 eager is itself accurate, and a doubled
// eager error must not hide a real bug.
#include <cmath>
#include <cstdio>
#include <memory>

#include "accuracy.h"
#include "args.h"
#include "commands.h"
#include "machine.h"
#include "problem.h"
#include "table.h"
#include "verify.h"

namespace tileattn::cli {
namespace {

constexpr double kAtolFp32 = 1e-5;
constexpr double kFp32Cap = 1e-4;
// fp16 and bf16: the inputs are the same rounded values for all three, so the rounding of O
// (2^-11 and 2^-8 relative) dominates; eager rounds S and P too, so 2 * err(eager) already
// exceeds it and 1e-3 only guards problems where eager happens to be exact.
constexpr double kAtolHalf = 1e-3;

// Runs one implementation into poisoned outputs and returns its errors against the oracle.
Errors check(Impl impl, AttentionData& data, const Options& options, const Oracle& oracle) {
  data.poison_outputs();
  run_impl(impl, data, options);
  return compare_to_oracle(oracle, data.shape(), data.out_on_host(), data.lse_on_host());
}

// Eager on the same device; when the device has no eager path yet, eager on the CPU with the same
// inputs (the generator depends only on the seed), since the bound is about precision.
Errors check_eager(AttentionData& data, const Options& options, const Oracle& oracle, int64_t seed) {
  if (auto why = eager_wont_fit(data.shape(), data.dtype(), data.device()))
    throw RuntimeError("eager: " + *why);
  if (data.device().kind == DeviceKind::kCPU) return check(Impl::kEager, data, options, oracle);
  try {
    return check(Impl::kEager, data, options, oracle);
  } catch (const std::exception& e) {
    std::printf("eager on %s failed (%s); eager on the CPU gives the bound\n",
                device_name(data.device()).c_str(), e.what());
    AttentionData host(data.shape(), data.dtype(), Device::cpu(), static_cast<uint64_t>(seed));
    return check(Impl::kEager, host, options, oracle);
  }
}

int run_verify(const VerifyArgs& a) {
  const Device device = resolve_device(a.device);
  const DType dtype = resolve_dtype(a.dtype, device);
  const Shape shape{a.batch,
                    a.heads,
                    a.kv_heads > 0 ? a.kv_heads : a.heads,
                    a.seqlen_q,
                    a.seqlen_k > 0 ? a.seqlen_k : a.seqlen_q,
                    a.head_dim};
  Options options;
  options.causal = a.causal;
  if (!a.window.empty()) std::tie(options.window_left, options.window_right) = parse_window(a.window);
  options.softcap = static_cast<float>(a.softcap);
  if (a.scale > 0) options.scale = static_cast<float>(a.scale);
  options.num_threads = a.threads;
  options.kernel = parse_kernel(a.kernel);
  if (a.backward) return run_verify_backward(a, shape, dtype, device, options);

  AttentionData data(shape, dtype, device, static_cast<uint64_t>(a.seed));
  const TensorRef lse = data.lse();
  const Support support = supported(data.q(), data.k(), data.v(), data.out(), &lse, options);
  if (!support) {  // the library's own words: which argument, its value, what was expected
    std::fprintf(stderr, "tileattn: %s\n", support.reason.c_str());
    return 2;
  }

  std::printf("tileattn verify: %s %s, causal %s, window (%lld, %lld), softcap %g, scale %s, seed %lld\n",
              shape_summary(shape).c_str(), dtype_name(dtype), a.causal ? "on" : "off",
              static_cast<long long>(options.window_left), static_cast<long long>(options.window_right),
              a.softcap, a.scale > 0 ? format("%g", a.scale).c_str() : "1/sqrt(D)",
              static_cast<long long>(a.seed));
  std::printf("device %s; kernel %s\n\n", describe_device(device, thread_count(a.threads)).c_str(),
              kernel_name(support.kernel));

  const Oracle oracle = run_oracle(data, options, {RowRange{0, shape.seqlen_q}});
  const Errors ours = check(Impl::kTiled, data, options, oracle);
  const Errors base = check_eager(data, options, oracle, a.seed);

  const bool fp32 = dtype == DType::kFloat32;
  const double atol = fp32 ? kAtolFp32 : kAtolHalf;
  const double bound_out = fp32 ? std::min(2 * base.out + atol, kFp32Cap) : 2 * base.out + atol;
  const double bound_lse = fp32 ? std::min(2 * base.lse + atol, kFp32Cap) : 2 * base.lse + atol;

  Table table({"<", "max |O - oracle|", "max |LSE - oracle|", "NaN in O (unwritten)", "NaN in LSE",
               "LSE -inf mismatches"});
  auto row = [&](const char* name, const Errors& e) {
    table.add_row({name, format_error(e.out), format_error(e.lse), std::to_string(e.out_nan),
                   std::to_string(e.lse_nan), std::to_string(e.lse_inf_mismatch)});
  };
  row("forward (tiled)", ours);
  row("eager", base);
  table.add_row({"bound for forward", format_error(bound_out), format_error(bound_lse), "0", "0", "0"});
  table.print(stdout);

  const bool written = ours.out_nan == 0 && ours.lse_nan == 0;
  const bool pass = written && ours.lse_inf_mismatch == 0 && ours.out <= bound_out && ours.lse <= bound_lse;
  std::printf("\n%lld rows checked (every batch, head and query row), %lld see no key (LSE = -inf)\n",
              static_cast<long long>(ours.rows), static_cast<long long>(ours.empty_rows));
  if (fp32)
    std::printf("bound: min(2 * eager + %.0e, %.0e), for O and LSE alike\n", atol, kFp32Cap);
  else
    std::printf("bound: 2 * eager + %.0e, for O and LSE alike\n", atol);
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace

Command add_verify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* sub = app.add_subcommand(
      "verify", "Check forward() (or backward()) against eager and the fp64 oracle on random inputs");
  sub->add_option("--batch", args->batch, "batch size B")->check(positive_int())->capture_default_str();
  sub->add_option("--heads", args->heads, "query heads Hq")->check(positive_int())->capture_default_str();
  sub->add_option("--kv-heads", args->kv_heads, "key/value heads Hkv (default: --heads)")
      ->check(positive_int());
  sub->add_option("--seqlen-q", args->seqlen_q, "query length Lq")
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--seqlen-k", args->seqlen_k, "key length Lk (default: --seqlen-q)")->check(positive_int());
  sub->add_option("--head-dim", args->head_dim, "head dimension D")
      ->check(positive_int())
      ->capture_default_str();
  add_dtype_flag(*sub, &args->dtype, "fp32, fp16 or bf16 (default: fp32 on the CPU, bf16 on a GPU)");
  sub->add_flag("--causal", args->causal, "causal mask, aligned bottom-right when Lq != Lk");
  sub->add_option("--window", args->window, "sliding window L,R (-1 = unbounded on that side)")
      ->check(window_pair());
  sub->add_option("--softcap", args->softcap, "S = C tanh(S / C) when C > 0")->check(non_negative_number());
  sub->add_option("--scale", args->scale, "softmax scale (default 1/sqrt(D))")->check(positive_number());
  sub->add_option("--seed", args->seed, "seed of the random inputs")
      ->check(non_negative_int())
      ->capture_default_str();
  add_device_flag(*sub, &args->device, false);
  add_kernel_flag(*sub, &args->kernel);
  sub->add_flag("--backward", args->backward,
                "check backward() (dq, dk, dv) against eager_backward() and the fp64 oracle instead");
  add_threads_flag(*sub, &args->threads);
  return {sub, [args] { return run_verify(*args); }};
}

}  // namespace tileattn::cli
