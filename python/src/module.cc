// module.cc: the extension tileattn._C: DLPack arrays in, tileattn::forward/eager/reference out.
//
// The Python layer (python/tileattn/__init__.py) allocates the outputs with the caller's own
// framework and passes every array here; this file only converts arrays to TensorRefs, calls the
// library without the GIL, and turns the library's exceptions into Python ones that name the
// argument. No math, no allocation.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "tileattn/tileattn.h"

namespace nb = nanobind;

namespace {

// A ValueError or TypeError whose message starts with the argument's name; the argument is also
// kept as the exception's `argument` attribute for callers that want it without parsing.
[[noreturn]] void raise_argument_error(PyObject* type, const std::string& argument,
                                       const std::string& message) {
  nb::object error = nb::steal(PyObject_CallFunction(type, "s", (argument + ": " + message).c_str()));
  if (!error.is_valid()) throw nb::python_error();
  nb::setattr(error, "argument", nb::str(argument.c_str()));
  PyErr_SetObject(type, error.ptr());
  throw nb::python_error();
}

// The library names options by their C++ field; Python callers know them by keyword.
std::string python_name(const std::string& argument) {
  if (argument == "options.scale") return "scale";
  if (argument == "options.softcap") return "softcap";
  if (argument == "options.window_left") return "window[0]";
  if (argument == "options.window_right") return "window[1]";
  if (argument == "options.causal") return "causal";
  return argument;
}

std::string dtype_string(nb::dlpack::dtype dt) {
  std::string name;
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int:
      name = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      name = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      name = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      name = "bfloat";
      break;
    case nb::dlpack::dtype_code::Complex:
      name = "complex";
      break;
    case nb::dlpack::dtype_code::Bool:
      return "bool";
    default:
      name = "dlpack-code-" + std::to_string(dt.code) + "-bits-";
      break;
  }
  name += std::to_string(dt.bits);
  if (dt.lanes != 1) name += "x" + std::to_string(dt.lanes);
  return name;
}

// u16_is_bf16: NumPy has no bfloat16 of its own (ml_dtypes adds one that DLPack cannot export),
// so the Python layer passes such arrays as uint16 views and sets this flag.
std::optional<tileattn::DType> to_dtype(nb::dlpack::dtype dt, bool u16_is_bf16) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return std::nullopt;
  const auto code = static_cast<Code>(dt.code);
  if (code == Code::Float && dt.bits == 32) return tileattn::DType::kFloat32;
  if (code == Code::Float && dt.bits == 16) return tileattn::DType::kFloat16;
  if (code == Code::Float && dt.bits == 64) return tileattn::DType::kFloat64;
  if (code == Code::Bfloat && dt.bits == 16) return tileattn::DType::kBFloat16;
  if (code == Code::UInt && dt.bits == 16 && u16_is_bf16) return tileattn::DType::kBFloat16;
  return std::nullopt;
}

template <typename Array>
tileattn::TensorRef to_ref(const Array& a, const std::string& name, bool u16_is_bf16) {
  tileattn::TensorRef t;
  if (a.ndim() > static_cast<size_t>(tileattn::kMaxRank)) {
    std::string shape = "[";
    for (size_t d = 0; d < a.ndim(); ++d) shape += (d ? ", " : "") + std::to_string(a.shape(d));
    raise_argument_error(
        PyExc_ValueError, name,
        "rank " + std::to_string(a.ndim()) + " (shape " + shape + "]), expected " +
            (name == "lse" ? "3 dims [batch, heads, seqlen_q]" : "4 dims [batch, seqlen, heads, head_dim]"));
  }
  const auto dtype = to_dtype(a.dtype(), u16_is_bf16);
  if (!dtype)
    raise_argument_error(
        PyExc_TypeError, name,
        "dtype " + dtype_string(a.dtype()) + " is not supported; expected float32, float16 or bfloat16");
  t.dtype = *dtype;
  if (a.device_type() == nb::device::cpu::value) {
    t.device = tileattn::Device::cpu();
  } else if (a.device_type() == nb::device::cuda::value) {
    t.device = tileattn::Device::cuda(a.device_id());
  } else {
    raise_argument_error(PyExc_ValueError, name,
                         "is on DLPack device type " + std::to_string(a.device_type()) +
                             "; tileattn runs on CPU (1) and CUDA (2) arrays");
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.rank = static_cast<int>(a.ndim());
  for (int d = 0; d < t.rank; ++d) {  // DLPack strides are in elements already
    t.shape[d] = a.shape(d);
    t.stride[d] = a.stride(d);
  }
  // An empty array's strides mean nothing and producers export anything (NumPy: all 0, which
  // would read as an output aliasing itself): give it row-major ones.
  if (t.numel() == 0) {
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.stride[d] = stride;
      stride *= std::max<int64_t>(t.shape[d], 1);
    }
  }
  return t;
}

// Imports one argument through DLPack (or the buffer protocol). Inputs may be read-only; outputs
// must be writable. No conversion or copy ever happens: a copied output would be written in vain.
template <typename Array>
Array import_array(nb::handle obj, const std::string& name) {
  Array array;
  if (!nb::try_cast(obj, array, /*convert=*/false)) {
    const std::string type_name = nb::type_name(obj.type()).c_str();
    const bool writable = std::is_same_v<Array, nb::ndarray<>>;
    raise_argument_error(PyExc_TypeError, name,
                         "got a " + type_name + ", which is not " +
                             (writable ? "a writable array" : "an array tileattn can read") +
                             " (expected an object with __dlpack__: NumPy, PyTorch, CuPy, JAX, ...)");
  }
  return array;
}

enum class Entry { kForward, kEager, kReference };

struct Call {
  bool causal = false;
  std::optional<double> scale;
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  uintptr_t stream = 0;
  bool u16_is_bf16 = false;
};

int64_t run(Entry entry, nb::handle q_obj, nb::handle k_obj, nb::handle v_obj, nb::handle out_obj,
            nb::handle lse_obj, const Call& call) {
  // The ndarrays own the DLPack capsules: they keep the memory alive until the call returns.
  const auto q_arr = import_array<nb::ndarray<nb::ro>>(q_obj, "q");
  const auto k_arr = import_array<nb::ndarray<nb::ro>>(k_obj, "k");
  const auto v_arr = import_array<nb::ndarray<nb::ro>>(v_obj, "v");
  const auto out_arr = import_array<nb::ndarray<>>(out_obj, "out");
  std::optional<nb::ndarray<>> lse_arr;
  if (!lse_obj.is_none()) lse_arr = import_array<nb::ndarray<>>(lse_obj, "lse");

  const auto q = to_ref(q_arr, "q", call.u16_is_bf16);
  const auto k = to_ref(k_arr, "k", call.u16_is_bf16);
  const auto v = to_ref(v_arr, "v", call.u16_is_bf16);
  const auto out = to_ref(out_arr, "out", call.u16_is_bf16);
  std::optional<tileattn::TensorRef> lse;
  if (lse_arr) lse = to_ref(*lse_arr, "lse", false);

  tileattn::Options options;
  if (call.scale) options.scale = static_cast<float>(*call.scale);
  options.causal = call.causal;
  options.window_left = call.window_left;
  options.window_right = call.window_right;
  options.softcap = static_cast<float>(call.softcap);
  options.cuda_stream = reinterpret_cast<void*>(call.stream);

  const tileattn::TensorRef* lse_ptr = lse ? &*lse : nullptr;
  tileattn::EagerStats stats;
  try {
    nb::gil_scoped_release no_gil;
    switch (entry) {
      case Entry::kForward:
        tileattn::forward(q, k, v, out, lse_ptr, options);
        break;
      case Entry::kEager:
        tileattn::eager(q, k, v, out, lse_ptr, options, &stats);
        break;
      case Entry::kReference:
        tileattn::reference(q, k, v, out, lse_ptr, options);
        break;
    }
  } catch (const tileattn::Error& e) {
    // The message under the argument's Python name.
    const bool is_dtype = e.message().find("dtype") != std::string::npos;
    raise_argument_error(is_dtype ? PyExc_TypeError : PyExc_ValueError, python_name(e.argument()), e.message());
  } catch (const tileattn::RuntimeError& e) {
    throw std::runtime_error(e.what());  // nanobind raises RuntimeError
  }
  return stats.extra_bytes;
}

Call make_call(bool causal, std::optional<double> scale, int64_t window_left, int64_t window_right,
               double softcap, uintptr_t stream, bool u16_is_bf16) {
  return Call{causal, scale, window_left, window_right, softcap, stream, u16_is_bf16};
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "tileattn's compiled core. Use the functions of the tileattn package instead.";

  const auto bind = [&m](const char* name, Entry entry, const char* doc) {
    m.def(
        name,
        [entry](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse, bool causal,
                std::optional<double> scale, int64_t window_left, int64_t window_right, double softcap,
                uintptr_t stream, bool u16_is_bf16) {
          return run(entry, q, k, v, out, lse,
                     make_call(causal, scale, window_left, window_right, softcap, stream, u16_is_bf16));
        },
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(), nb::kw_only(),
        nb::arg("causal") = false, nb::arg("scale").none() = nb::none(), nb::arg("window_left") = -1,
        nb::arg("window_right") = -1, nb::arg("softcap") = 0.0, nb::arg("stream") = 0,
        nb::arg("u16_is_bf16") = false, doc);
  };
  bind("forward", Entry::kForward,
       "forward(q, k, v, out, lse, *, causal, scale, window_left, window_right, softcap, stream, "
       "u16_is_bf16) -> 0\n\nRuns tileattn::forward, writing out (and lse unless None).");
  bind("eager", Entry::kEager,
       "Runs tileattn::eager (S and P materialized); returns the bytes it allocated for them.");
  bind("reference", Entry::kReference, "Runs the fp64 oracle tileattn::reference (CPU arrays).");

  m.def(
      "version", [] { return std::string(tileattn::version()); }, "The library's version.");
  m.def("built_with_cuda", &tileattn::built_with_cuda, "Whether the CUDA kernels are compiled in.");
  m.def("cuda_device_count", &tileattn::cuda_device_count,
        "CUDA devices visible to tileattn (0 without CUDA kernels or without a GPU).");
  m.def(
      "cpu_isa", [] { return std::string(tileattn::cpu_isa()); },
      "The SIMD level the CPU kernels run at: avx512, avx2 or generic.");
}
