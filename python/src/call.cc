// call.cc: options, varlen index arrays and errors shared by the bindings.
#include "call.h"

namespace tileattn::python {
namespace {

// The library names options by their C++ field; Python callers know them by keyword.
std::string python_name(const std::string& argument) {
  if (argument == "options.scale") return "scale";
  if (argument == "options.softcap") return "softcap";
  if (argument == "options.window_left") return "window[0]";
  if (argument == "options.window_right") return "window[1]";
  if (argument == "options.causal") return "causal";
  if (argument == "options.kernel") return "kernel";
  if (argument == "options.num_splits") return "num_splits";
  if (argument.rfind("seqlens.", 0) == 0) return argument.substr(8);  // cu_seqlens_q, max_seqlen_k, ...
  return argument;
}

Kernel to_kernel(const std::string& name) {
  for (auto k : {Kernel::kAuto, Kernel::kCpuTiled, Kernel::kCudaSm80, Kernel::kCudaSm90})
    if (name == kernel_name(k)) return k;
  raise_argument_error(PyExc_ValueError, "kernel",
                       "'" + name + "', expected 'auto', 'cpu', 'sm80' or 'sm90'");
}

}  // namespace

void raise_library_error(const Error& e) {
  const bool is_dtype = e.message().find("dtype") != std::string::npos;
  raise_argument_error(is_dtype ? PyExc_TypeError : PyExc_ValueError, python_name(e.argument()), e.message());
}

Options options_of(const Call& call) {
  Options options;
  if (call.scale) options.scale = static_cast<float>(*call.scale);
  options.causal = call.causal;
  options.window_left = call.window_left;
  options.window_right = call.window_right;
  options.softcap = static_cast<float>(call.softcap);
  options.cuda_stream = reinterpret_cast<void*>(call.stream);
  options.kernel = to_kernel(call.kernel);
  options.num_splits = call.num_splits;
  options.check_indices = call.check_indices;
  options.deterministic = call.deterministic;
  return options;
}

Seqlens read_seqlens(Arrays& arrays, const Varlen& varlen, std::array<std::optional<TensorRef>, 4>& storage) {
  Seqlens seqlens;
  const nb::handle handles[] = {varlen.cu_q, varlen.cu_k, varlen.used_q, varlen.used_k};
  const char* names[] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k"};
  const TensorRef** fields[] = {&seqlens.cu_seqlens_q, &seqlens.cu_seqlens_k, &seqlens.seqused_q,
                                &seqlens.seqused_k};
  for (int i = 0; i < 4; ++i) {
    storage[i] = arrays.read_optional(handles[i], names[i], false, "[batch + 1] or [batch]");
    *fields[i] = storage[i] ? &*storage[i] : nullptr;
  }
  seqlens.max_seqlen_q = varlen.max_q;
  seqlens.max_seqlen_k = varlen.max_k;
  return seqlens;
}

}  // namespace tileattn::python
