// cmd_verify_backward.cc: `tileattn verify --backward`: backward() against eager_backward() and
// the fp64 oracle (reference_backward) on random inputs and a random output gradient.
// Pass, for dq, dk and dv separately: every element written (finite where the oracle is), and
//   err(backward) <= 3 * err(eager) + atol   (err = max |x - oracle|)
// with atol one rounding of the largest gradient in the dtype, plus, in fp32, err <= 1e-4 *
// max(1, largest |gradient|): eager is itself accurate there.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "args.h"
#include "machine.h"
#include "problem.h"
#include "table.h"
#include "verify.h"

namespace tileattn::cli {
namespace {

struct GradErrors {
  double err = 0;    // max |x - oracle| where the oracle is finite
  double scale = 0;  // max |oracle|
  int64_t bad = 0;   // elements not finite where the oracle is (unwritten: NaN poison)
};

GradErrors grad_errors(const Buffer& x, const Buffer& oracle) {
  GradErrors e;
  for (int64_t i = 0; i < oracle.numel(); ++i) {
    const double r = oracle.at(i), v = x.at(i);
    if (!std::isfinite(r)) continue;
    e.scale = std::max(e.scale, std::abs(r));
    if (!std::isfinite(v))
      ++e.bad;
    else
      e.err = std::max(e.err, std::abs(v - r));
  }
  return e;
}

// One rounding of the largest gradient in the dtype (its unit roundoff times it).
double grad_atol(DType dtype, double scale) {
  const double eps = dtype == DType::kFloat32   ? std::ldexp(1.0, -24)
                     : dtype == DType::kFloat16 ? std::ldexp(1.0, -11)
                                                : std::ldexp(1.0, -8);
  return eps * scale;
}

}  // namespace

int run_verify_backward(const VerifyArgs& a, const Shape& s, DType dtype, Device device,
                        const Options& options) {
  if (auto why = eager_backward_wont_fit(s)) {
    std::fprintf(stderr, "tileattn: %s\n", why->c_str());
    return 1;
  }
  AttentionData data(s, dtype, device, static_cast<uint64_t>(a.seed));
  GradBuffers g(data, static_cast<uint64_t>(a.seed));
  g.poison();
  // The library's own words on failure: which argument, its value, what was expected.
  const Support support = backward_support(data, g, options);
  if (!support) {
    std::fprintf(stderr, "tileattn: %s\n", support.reason.c_str());
    return 2;
  }
  const Kernel kernel = support.kernel;
  try {
    run_impl(Impl::kTiled, data, options);  // out and lse, as training keeps them
    run_backward(Impl::kTiled, data, g, options);
  } catch (const Error& e) {  // the forward's own checks (supported_backward checks the backward's)
    std::fprintf(stderr, "tileattn: %s\n", e.what());
    return 2;
  }
  std::printf(
      "tileattn verify --backward: %s %s, causal %s, window (%lld, %lld), softcap %g, scale %s, seed %lld\n",
      shape_summary(s).c_str(), dtype_name(dtype), a.causal ? "on" : "off",
      static_cast<long long>(options.window_left), static_cast<long long>(options.window_right), a.softcap,
      a.scale > 0 ? format("%g", a.scale).c_str() : "1/sqrt(D)", static_cast<long long>(a.seed));
  std::printf("device %s; kernel %s\n\n", describe_device(device, thread_count(a.threads)).c_str(),
              kernel_name(kernel));

  // The oracle and eager run on the CPU, from the same inputs and output gradient.
  Options host_options = options;
  host_options.kernel = Kernel::kAuto;
  const int64_t nq = g.host_dout.numel(), nk = g.dk.numel();
  Buffer rq(DType::kFloat64, nq), rk(DType::kFloat64, nk), rv(DType::kFloat64, nk);
  reference_backward(g.q_view(g.host_dout), data.host_q(), data.host_k(), data.host_v(), g.q_view(rq),
                     g.k_view(rk), g.k_view(rv), host_options);
  Buffer eq(dtype, nq), ek(dtype, nk), ev(dtype, nk);
  eager_backward(g.q_view(g.host_dout), data.host_q(), data.host_k(), data.host_v(), g.q_view(eq),
                 g.k_view(ek), g.k_view(ev), host_options);

  const Buffer hq = copy_to(g.dq, Device::cpu()), hk = copy_to(g.dk, Device::cpu()),
               hv = copy_to(g.dv, Device::cpu());
  const Buffer* ours[] = {&hq, &hk, &hv};
  const Buffer* eager[] = {&eq, &ek, &ev};
  const Buffer* oracle[] = {&rq, &rk, &rv};
  const char* names[] = {"dq", "dk", "dv"};
  const bool fp32 = dtype == DType::kFloat32;
  Table table({"<", "max |ours - oracle|", "max |eager - oracle|", "bound", "max |oracle|",
               "not finite (unwritten)"});
  bool pass = true;
  for (int i = 0; i < 3; ++i) {
    const GradErrors o = grad_errors(*ours[i], *oracle[i]), e = grad_errors(*eager[i], *oracle[i]);
    double bound = 3 * e.err + grad_atol(dtype, o.scale);
    if (fp32) bound = std::min(bound, 1e-4 * std::max(1.0, o.scale));
    pass = pass && o.bad == 0 && o.err <= bound;
    table.add_row({names[i], format_error(o.err), format_error(e.err), format_error(bound),
                   format_error(o.scale), std::to_string(o.bad)});
  }
  table.print(stdout);
  std::printf("\nbound: 3 * eager + one rounding of the largest gradient%s\n",
              fp32 ? ", at most 1e-4 * max(1, largest) (fp32)" : "");
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace tileattn::cli
