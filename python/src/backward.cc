// backward.cc: tileattn._C.backward / reference_backward / eager_backward: the gradients of the
// forward, the arrays (outputs dq, dk, dv allocated by the Python layer) read as TensorRefs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "call.h"

namespace tileattn::python {
namespace {

enum class Entry { kBackward, kReference, kEager };

struct Arguments {
  nb::handle dout, q, k, v, out, lse, dq, dk, dv, dlse;
};

void run(Entry entry, const Arguments& a, const Varlen* varlen, const Call& call) {
  Arrays arrays(call.u16_is_bf16);
  const auto dout = arrays.read(a.dout, "dout", false, kLayoutBLHD);
  const auto q = arrays.read(a.q, "q", false, kLayoutBLHD);
  const auto k = arrays.read(a.k, "k", false, kLayoutBLHD);
  const auto v = arrays.read(a.v, "v", false, kLayoutBLHD);
  const auto out = arrays.read_optional(a.out, "out", false, kLayoutBLHD);
  const auto lse = arrays.read_optional(a.lse, "lse", false, kLayoutLse);
  const auto dq = arrays.read(a.dq, "dq", true, kLayoutBLHD);
  const auto dk = arrays.read(a.dk, "dk", true, kLayoutBLHD);
  const auto dv = arrays.read(a.dv, "dv", true, kLayoutBLHD);
  const auto dlse = arrays.read_optional(a.dlse, "dlse", false, kLayoutLse);
  std::array<std::optional<TensorRef>, 4> index;
  const Seqlens seqlens = varlen ? read_seqlens(arrays, *varlen, index) : Seqlens{};
  const Options options = options_of(call);
  const TensorRef* dlse_ptr = dlse ? &*dlse : nullptr;
  if (entry == Entry::kBackward && (!out || !lse))
    raise_argument_error(PyExc_ValueError, out ? "lse" : "out", "is required (the forward's result)");
  call_library([&] {
    switch (entry) {
      case Entry::kBackward:
        if (varlen)
          backward_varlen(dout, q, k, v, *out, *lse, dq, dk, dv, seqlens, options, dlse_ptr);
        else
          backward(dout, q, k, v, *out, *lse, dq, dk, dv, options, dlse_ptr);
        break;
      case Entry::kReference:
        if (varlen)
          reference_backward_varlen(dout, q, k, v, dq, dk, dv, seqlens, options, dlse_ptr);
        else
          reference_backward(dout, q, k, v, dq, dk, dv, options, dlse_ptr);
        break;
      case Entry::kEager:
        eager_backward(dout, q, k, v, dq, dk, dv, options, dlse_ptr);
        break;
    }
  });
}

}  // namespace

void bind_backward(nb::module_& m) {
  const auto bind = [&m](const char* name, Entry entry, const char* doc) {
    m.def(
        name,
        [entry](nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                nb::handle dq, nb::handle dk, nb::handle dv, nb::handle dlse, nb::handle cu_q,
                nb::handle cu_k, nb::handle used_q, nb::handle used_k, int64_t max_q, int64_t max_k,
                bool varlen, bool causal, std::optional<double> scale, int64_t window_left,
                int64_t window_right, double softcap, uintptr_t stream, bool u16_is_bf16, bool deterministic,
                bool check_indices, const std::string& kernel) {
          const Varlen index{cu_q, cu_k, used_q, used_k, max_q, max_k};
          Call call{causal,      scale,  window_left, window_right,  softcap,      stream,
                    u16_is_bf16, kernel, 0,           check_indices, deterministic};
          run(entry, Arguments{dout, q, k, v, out, lse, dq, dk, dv, dlse}, varlen ? &index : nullptr, call);
        },
        nb::arg("dout"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out").none(),
        nb::arg("lse").none(), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("dlse").none(),
        nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(), nb::arg("seqused_q").none(),
        nb::arg("seqused_k").none(), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::kw_only(),
        nb::arg("varlen") = false, nb::arg("causal") = false, nb::arg("scale").none() = nb::none(),
        nb::arg("window_left") = -1, nb::arg("window_right") = -1, nb::arg("softcap") = 0.0,
        nb::arg("stream") = 0, nb::arg("u16_is_bf16") = false, nb::arg("deterministic") = false,
        nb::arg("check_indices") = false, nb::arg("kernel") = "auto", doc);
  };
  bind("backward", Entry::kBackward,
       "Runs tileattn::backward (varlen=True: backward_varlen), writing dq, dk, dv.");
  bind("reference_backward", Entry::kReference,
       "Runs the fp64 oracle tileattn::reference_backward(_varlen) (CPU; out and lse unused).");
  bind("eager_backward", Entry::kEager, "Runs tileattn::eager_backward (CPU; out and lse unused).");
}

}  // namespace tileattn::python
