// forward.cc: the public entry points: validate once, select, run.
#include <cstdlib>

#include "api/device_caps.h"
#include "api/validate.h"
#include "cpu/cpu_forward.h"
#include "dispatch/select.h"
#include "reference/reference.h"
#include "simd/simd.h"
#include "tileattn/tileattn.h"
#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_api.h"
#endif

namespace tileattn {
namespace {

// Validation and selection together; returns the params and the kernel, or throws.
detail::Selection prepare(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                          const TensorRef* lse, const Seqlens* seqlens, const Options& options,
                          detail::AttnParams* params) {
  if (auto error = detail::make_params(q, k, v, out, lse, seqlens, options, detail::Entry::kForward, params))
    throw *error;
  auto sel = detail::select_kernel(*params, detail::device_caps(q.device), options.kernel);
  if (!sel.ok()) throw Error(sel.argument, sel.reason);
  return sel;
}

void run(const detail::AttnParams& params, Kernel kernel) {
#if defined(TILEATTN_WITH_CUDA)
  // Checked mode: device index tensors validated before anything runs (CPU ones always are).
  if (params.check_indices && kernel != Kernel::kCpuTiled) {
    detail::IndexFaultAt faults[2];
    detail::cuda::find_index_faults(params, faults);
    for (int side = 0; side < 2; ++side)
      if (auto e = detail::index_fault_error(faults[side], side == 0)) throw *e;
  }
#endif
  switch (kernel) {
    case Kernel::kCpuTiled:
      detail::cpu::forward(params);
      break;
#if defined(TILEATTN_WITH_CUDA)
    case Kernel::kCudaSm80:
    case Kernel::kCudaSm90:
      detail::cuda::forward(params, kernel);
      break;
#endif
    default:
      throw RuntimeError(std::string("kernel ") + kernel_name(kernel) + " is not in this build");
  }
}

Support support_of(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                   const TensorRef* lse, const Seqlens* seqlens, const Options& options) {
  detail::AttnParams params;
  try {
    const auto sel = prepare(q, k, v, out, lse, seqlens, options, &params);
    return Support{true, sel.kernel, {}};
  } catch (const Error& e) {
    return Support{false, Kernel::kAuto, e.what()};
  }
}

}  // namespace

void forward(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
             const TensorRef* lse, const Options& options) {
  detail::AttnParams params;
  run(params, prepare(q, k, v, out, lse, nullptr, options, &params).kernel);
}

void forward_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                    const TensorRef* lse, const Seqlens& seqlens, const Options& options) {
  detail::AttnParams params;
  run(params, prepare(q, k, v, out, lse, &seqlens, options, &params).kernel);
}

Support supported(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                  const TensorRef* lse, const Options& options) {
  return support_of(q, k, v, out, lse, nullptr, options);
}

Support supported_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                         const TensorRef* lse, const Seqlens& seqlens, const Options& options) {
  return support_of(q, k, v, out, lse, &seqlens, options);
}

void reference(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
               const TensorRef* lse, const Options& options) {
  reference_rows(q, k, v, out, lse, options, 0, q.rank == 4 ? q.shape[1] : 0);
}

void reference_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                      const TensorRef* lse, const Seqlens& seqlens, const Options& options) {
  detail::AttnParams params;
  if (auto error =
          detail::make_params(q, k, v, out, lse, &seqlens, options, detail::Entry::kReference, &params))
    throw *error;
  detail::reference::oracle(params, 0, params.seqlen_q);
}

void reference_rows(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                    const TensorRef* lse, const Options& options, int64_t row_begin, int64_t row_end) {
  detail::AttnParams params;
  if (auto error =
          detail::make_params(q, k, v, out, lse, nullptr, options, detail::Entry::kReference, &params))
    throw *error;
  if (row_begin < 0 || row_begin > row_end)
    throw Error("row_begin", std::to_string(row_begin) + " with row_end " + std::to_string(row_end) +
                                 ", expected 0 <= row_begin <= row_end");
  detail::reference::oracle(params, row_begin, row_end);
}

void eager(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
           const TensorRef* lse, const Options& options, EagerStats* stats) {
  detail::AttnParams params;
  if (auto error = detail::make_params(q, k, v, out, lse, nullptr, options, detail::Entry::kEager, &params))
    throw *error;
  int64_t bytes = 0;
  if (q.device.kind == DeviceKind::kCPU) {
    bytes = detail::reference::eager(params);
  } else {
#if defined(TILEATTN_WITH_CUDA)
    const auto caps = detail::device_caps(q.device);
    if (q.device.index >= caps.device_count)
      throw Error("q", "is on " + device_name(q.device) + ", but " + std::to_string(caps.device_count) +
                           " CUDA device(s) are present");
    bytes = detail::cuda::eager(params);
#else
    throw Error("q", "is on " + device_name(q.device) + ", but this build of tileattn has no CUDA kernels");
#endif
  }
  if (stats) stats->extra_bytes = bytes;
}

bool built_with_cuda() {
#if defined(TILEATTN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

bool built_with_cuda_backward() {
#if defined(TILEATTN_WITH_CUDA) && defined(TILEATTN_CUDA_BACKWARD)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(TILEATTN_WITH_CUDA)
  return detail::cuda::device_count();
#else
  return 0;
#endif
}

const char* cpu_isa() { return detail::simd().isa; }

}  // namespace tileattn
