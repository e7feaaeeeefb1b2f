// call.h: what every binding of the extension shares: a call's keyword options as the library's
// Options, the varlen index arrays as Seqlens, and library errors as Python errors.
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "arrays.h"
#include "tileattn/tileattn.h"

namespace tileattn::python {

inline constexpr const char* kLayoutBLHD = "[batch, seqlen, heads, head_dim]";
inline constexpr const char* kLayoutLse = "[batch, heads, seqlen_q]";

// The keyword options of a call, as Python passes them.
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
  bool deterministic = false;
};
Options options_of(const Call& call);  // raises ValueError for an unknown kernel name

// The varlen arguments (None: not given; maxima -1: computed on the CPU).
struct Varlen {
  nb::handle cu_q, cu_k, used_q, used_k;
  int64_t max_q = -1, max_k = -1;
};
// Reads them through `arrays`; the TensorRefs the Seqlens point at live in `storage`.
Seqlens read_seqlens(Arrays& arrays, const Varlen& varlen, std::array<std::optional<TensorRef>, 4>& storage);

// A library Error as the Python error its message implies (TypeError for dtypes, else
// ValueError), under the argument's Python name.
[[noreturn]] void raise_library_error(const Error& e);

// Runs f without the GIL, translating the library's exceptions.
template <class F>
void call_library(F&& f) {
  try {
    nb::gil_scoped_release no_gil;
    f();
  } catch (const Error& e) {
    raise_library_error(e);
  } catch (const RuntimeError& e) {
    throw std::runtime_error(e.what());  // nanobind raises RuntimeError
  }
}

// The extension's backward functions (backward.cc) and KV-cache attention (kvcache.cc).
void bind_backward(nb::module_& m);
void bind_kvcache(nb::module_& m);

}  // namespace tileattn::python
