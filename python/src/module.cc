// module.cc: the extension tileattn._C: arrays in (arrays.h), tileattn::forward/eager/reference out.
//
// The Python layer (python/tileattn/__init__.py) allocates the outputs with the caller's own
// framework and passes every array here; this file only converts arrays to TensorRefs, calls the
// library without the GIL, and turns the library's exceptions into Python ones that name the
// argument. No math, no allocation.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "arrays.h"
#include "tileattn/tileattn.h"

namespace nb = nanobind;

namespace {

using tileattn::python::Arrays;
using tileattn::python::raise_argument_error;

constexpr const char* kLayoutBLHD = "[batch, seqlen, heads, head_dim]";
constexpr const char* kLayoutLse = "[batch, heads, seqlen_q]";

// The library names options by their C++ field; Python callers know them by keyword.
std::string python_name(const std::string& argument);

// A library Error as the Python error its message implies, under the argument's Python name.
[[noreturn]] void raise_library_error(const tileattn::Error& e) {
  const bool is_dtype = e.message().find("dtype") != std::string::npos;
  raise_argument_error(is_dtype ? PyExc_TypeError : PyExc_ValueError, python_name(e.argument()), e.message());
}

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

enum class Entry { kForward, kEager, kReference };

// The varlen arguments of forward_varlen / reference_varlen (None: not given).
struct Varlen {
  nb::handle cu_q, cu_k, used_q, used_k;
  int64_t max_q = -1, max_k = -1;
};

struct Call {
  bool causal = false;
  std::optional<double> scale;
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  uintptr_t stream = 0;
  bool u16_is_bf16 = false;
  std::string kernel = "auto";
  int num_splits = 0;
  bool check_indices = false;
};

tileattn::Kernel to_kernel(const std::string& name) {
  for (auto k : {tileattn::Kernel::kAuto, tileattn::Kernel::kCpuTiled, tileattn::Kernel::kCudaSm80,
                 tileattn::Kernel::kCudaSm90})
    if (name == tileattn::kernel_name(k)) return k;
  raise_argument_error(PyExc_ValueError, "kernel",
                       "'" + name + "', expected 'auto', 'cpu', 'sm80' or 'sm90'");
}

int64_t run(Entry entry, nb::handle q_obj, nb::handle k_obj, nb::handle v_obj, nb::handle out_obj,
            nb::handle lse_obj, const Call& call, const Varlen* varlen = nullptr) {
  Arrays arrays(call.u16_is_bf16);  // keeps DLPack imports alive until the call returns
  const auto q = arrays.read(q_obj, "q", false, kLayoutBLHD);
  const auto k = arrays.read(k_obj, "k", false, kLayoutBLHD);
  const auto v = arrays.read(v_obj, "v", false, kLayoutBLHD);
  const auto out = arrays.read(out_obj, "out", true, kLayoutBLHD);
  const auto lse = arrays.read_optional(lse_obj, "lse", true, kLayoutLse);
  std::optional<tileattn::TensorRef> cu_q, cu_k, used_q, used_k;
  tileattn::Seqlens seqlens;
  if (varlen) {
    const auto index = [&](nb::handle h, const char* name, std::optional<tileattn::TensorRef>& t,
                           const tileattn::TensorRef*& field) {
      t = arrays.read_optional(h, name, false, "[batch + 1] or [batch]");
      field = t ? &*t : nullptr;
    };
    index(varlen->cu_q, "cu_seqlens_q", cu_q, seqlens.cu_seqlens_q);
    index(varlen->cu_k, "cu_seqlens_k", cu_k, seqlens.cu_seqlens_k);
    index(varlen->used_q, "seqused_q", used_q, seqlens.seqused_q);
    index(varlen->used_k, "seqused_k", used_k, seqlens.seqused_k);
    seqlens.max_seqlen_q = varlen->max_q;
    seqlens.max_seqlen_k = varlen->max_k;
  }

  tileattn::Options options;
  if (call.scale) options.scale = static_cast<float>(*call.scale);
  options.causal = call.causal;
  options.window_left = call.window_left;
  options.window_right = call.window_right;
  options.softcap = static_cast<float>(call.softcap);
  options.cuda_stream = reinterpret_cast<void*>(call.stream);
  options.kernel = to_kernel(call.kernel);
  options.num_splits = call.num_splits;
  options.check_indices = call.check_indices;

  const tileattn::TensorRef* lse_ptr = lse ? &*lse : nullptr;
  tileattn::EagerStats stats;
  try {
    nb::gil_scoped_release no_gil;
    switch (entry) {
      case Entry::kForward:
        if (varlen)
          tileattn::forward_varlen(q, k, v, out, lse_ptr, seqlens, options);
        else
          tileattn::forward(q, k, v, out, lse_ptr, options);
        break;
      case Entry::kEager:
        tileattn::eager(q, k, v, out, lse_ptr, options, &stats);
        break;
      case Entry::kReference:
        if (varlen)
          tileattn::reference_varlen(q, k, v, out, lse_ptr, seqlens, options);
        else
          tileattn::reference(q, k, v, out, lse_ptr, options);
        break;
    }
  } catch (const tileattn::Error& e) {
    raise_library_error(e);
  } catch (const tileattn::RuntimeError& e) {
    throw std::runtime_error(e.what());  // nanobind raises RuntimeError
  }
  return stats.extra_bytes;
}

void combine(nb::handle o_obj, nb::handle l_obj, nb::handle out_obj, nb::handle lse_obj, uintptr_t stream,
             bool u16_is_bf16) {
  Arrays arrays(u16_is_bf16);
  const auto o_part = arrays.read(o_obj, "out_partial", false, "[splits, batch, seqlen, heads, head_dim]");
  const auto l_part = arrays.read(l_obj, "lse_partial", false, "[splits, batch, heads, seqlen]");
  const auto out = arrays.read(out_obj, "out", true, kLayoutBLHD);
  const auto lse = arrays.read_optional(lse_obj, "lse", true, kLayoutLse);
  tileattn::Options options;
  options.cuda_stream = reinterpret_cast<void*>(stream);
  try {
    nb::gil_scoped_release no_gil;
    tileattn::combine(o_part, l_part, out, lse ? &*lse : nullptr, options);
  } catch (const tileattn::Error& e) {
    raise_library_error(e);
  } catch (const tileattn::RuntimeError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "tileattn's compiled core. Use the functions of the tileattn package instead.";

  const auto bind = [&m](const char* name, Entry entry, const char* doc) {
    m.def(
        name,
        [entry](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, bool causal,
                std::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
                uintptr_t stream, bool u16_is_bf16, std::string kernel, int num_splits) {
          return run(entry, q, k, v, out, lse,
                     Call{causal, scale, window_left, window_right, softcap, stream, u16_is_bf16,
                          std::move(kernel), num_splits, false});
        },
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(), nb::kw_only(),
        nb::arg("causal") = false, nb::arg("scale").none() = nb::none(), nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("softcap") = 0.0, nb::arg("stream") = 0,
        nb::arg("u16_is_bf16") = false, nb::arg("kernel") = "auto", nb::arg("num_splits") = 0, doc);
  };
  bind("forward", Entry::kForward,
       "forward(q, k, v, out, lse, *, causal, scale, window_left, window_right, softcap, stream, "
       "u16_is_bf16, kernel, num_splits) -> 0\n\nRuns tileattn::forward, writing out (and lse unless None).");
  bind("eager", Entry::kEager,
       "Runs tileattn::eager (S and P materialized); returns the bytes it allocated for them.");
  bind("reference", Entry::kReference, "Runs the fp64 oracle tileattn::reference (CPU arrays).");

  const auto bind_varlen = [&m](const char* name, Entry entry, const char* doc) {
    m.def(
        name,
        [entry](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, nb::handle cu_q,
                nb::handle cu_k, nb::handle used_q, nb::handle used_k, int64_t max_q, int64_t max_k,
                bool causal, std::optional<double> scale, int64_t window_left, int64_t window_right,
                double softcap, uintptr_t stream, bool u16_is_bf16, std::string kernel, int num_splits,
                bool check_indices) {
          const Varlen varlen{cu_q, cu_k, used_q, used_k, max_q, max_k};
          return run(entry, q, k, v, out, lse,
                     Call{causal, scale, window_left, window_right, softcap, stream, u16_is_bf16,
                          std::move(kernel), num_splits, check_indices},
                     &varlen);
        },
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(),
        nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(), nb::arg("seqused_q").none(),
        nb::arg("seqused_k").none(), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::kw_only(),
        nb::arg("causal") = false, nb::arg("scale").none() = nb::none(), nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("softcap") = 0.0, nb::arg("stream") = 0,
        nb::arg("u16_is_bf16") = false, nb::arg("kernel") = "auto", nb::arg("num_splits") = 0,
        nb::arg("check_indices") = false, doc);
  };
  bind_varlen(
      "forward_varlen", Entry::kForward,
      "Runs tileattn::forward_varlen: index arrays (int32) or None, maxima (-1: computed on the CPU).");
  bind_varlen("reference_varlen", Entry::kReference,
              "Runs the fp64 oracle tileattn::reference_varlen (CPU).");
  m.def(
      "combine", &combine, nb::arg("out_partial"), nb::arg("lse_partial"), nb::arg("out"),
      nb::arg("lse").none(), nb::kw_only(), nb::arg("stream") = 0, nb::arg("u16_is_bf16") = false,
      "Runs tileattn::combine: out_partial [S, B, L, H, D], lse_partial [S, B, H, L] (fp32) into out, lse.");

  m.def(
      "version", [] { return std::string(tileattn::version()); }, "The library's version.");
  m.def("built_with_cuda", &tileattn::built_with_cuda, "Whether the CUDA kernels are compiled in.");
  m.def("cuda_device_count", &tileattn::cuda_device_count,
        "CUDA devices visible to tileattn (0 without CUDA kernels or without a GPU).");
  m.def(
      "cpu_isa", [] { return std::string(tileattn::cpu_isa()); },
      "The SIMD level the CPU kernels run at: avx512, avx2 or generic.");
}
