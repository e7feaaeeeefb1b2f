// module.cc: the extension tileattn._C: arrays in (arrays.h), tileattn::forward/eager/reference
// out (the backward functions: backward.cc).
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
#include "call.h"
#include "tileattn/tileattn.h"

namespace nb = nanobind;

namespace {

using tileattn::python::Arrays;
using tileattn::python::Call;
using tileattn::python::call_library;
using tileattn::python::kLayoutBLHD;
using tileattn::python::kLayoutLse;
using tileattn::python::Varlen;

enum class Entry { kForward, kEager, kReference };

int64_t run(Entry entry, nb::handle q_obj, nb::handle k_obj, nb::handle v_obj, nb::handle out_obj,
            nb::handle lse_obj, const Call& call, const Varlen* varlen = nullptr) {
  Arrays arrays(call.u16_is_bf16);  // keeps DLPack imports alive until the call returns
  const auto q = arrays.read(q_obj, "q", false, kLayoutBLHD);
  const auto k = arrays.read(k_obj, "k", false, kLayoutBLHD);
  const auto v = arrays.read(v_obj, "v", false, kLayoutBLHD);
  const auto out = arrays.read(out_obj, "out", true, kLayoutBLHD);
  const auto lse = arrays.read_optional(lse_obj, "lse", true, kLayoutLse);
  std::array<std::optional<tileattn::TensorRef>, 4> index;
  const tileattn::Seqlens seqlens = varlen ? read_seqlens(arrays, *varlen, index) : tileattn::Seqlens{};
  const tileattn::Options options = options_of(call);

  const tileattn::TensorRef* lse_ptr = lse ? &*lse : nullptr;
  tileattn::EagerStats stats;
  call_library([&] {
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
  });
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
  call_library([&] { tileattn::combine(o_part, l_part, out, lse ? &*lse : nullptr, options); });
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
                          std::move(kernel), num_splits, false, false});
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
                          std::move(kernel), num_splits, check_indices, false},
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

  tileattn::python::bind_backward(m);
  tileattn::python::bind_kvcache(m);

  m.def(
      "version", [] { return std::string(tileattn::version()); }, "The library's version.");
  m.def("built_with_cuda", &tileattn::built_with_cuda, "Whether the CUDA kernels are compiled in.");
  m.def("built_with_cuda_backward", &tileattn::built_with_cuda_backward,
        "Whether the CUDA backward kernels are compiled in.");
  m.def("cuda_device_count", &tileattn::cuda_device_count,
        "CUDA devices visible to tileattn (0 without CUDA kernels or without a GPU).");
  m.def(
      "cpu_isa", [] { return std::string(tileattn::cpu_isa()); },
      "The SIMD level the CPU kernels run at: avx512, avx2 or generic.");
}
