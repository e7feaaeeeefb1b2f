// arrays.cc: reading Python arrays as TensorRefs (see arrays.h).
#include "arrays.h"

#include <algorithm>
#include <cstdint>

namespace tileattn::python {
namespace {

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

std::optional<DType> to_dtype(nb::dlpack::dtype dt, bool u16_is_bf16) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return std::nullopt;
  const auto code = static_cast<Code>(dt.code);
  if (code == Code::Float && dt.bits == 32) return DType::kFloat32;
  if (code == Code::Float && dt.bits == 16) return DType::kFloat16;
  if (code == Code::Float && dt.bits == 64) return DType::kFloat64;
  if (code == Code::Bfloat && dt.bits == 16) return DType::kBFloat16;
  if (code == Code::UInt && dt.bits == 16 && u16_is_bf16) return DType::kBFloat16;
  if (code == Code::Int && dt.bits == 32) return DType::kInt32;  // index tensors (cu_seqlens, ...)
  return std::nullopt;
}

[[noreturn]] void raise_unsupported_dtype(const std::string& name, const std::string& dtype) {
  raise_argument_error(PyExc_TypeError, name,
                       "dtype " + dtype + " is not supported; expected float32, float16 or bfloat16");
}

[[noreturn]] void raise_rank(const std::string& name, const int64_t* shape, size_t ndim, const char* layout) {
  std::string text = "[";
  for (size_t d = 0; d < ndim; ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  raise_argument_error(PyExc_ValueError, name,
                       "rank " + std::to_string(ndim) + " (shape " + text + "]), expected at most " +
                           std::to_string(kMaxRank) + " dims " + layout);
}

// An empty array's strides mean nothing and producers export anything (NumPy: all 0, which
// would read as an output aliasing itself): give it row-major ones.
void normalize_empty(TensorRef& t) {
  if (t.numel() != 0) return;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= std::max<int64_t>(t.shape[d], 1);
  }
}

template <typename Array>
TensorRef from_dlpack(const Array& a, const std::string& name, bool u16_is_bf16, const char* layout) {
  if (a.ndim() > static_cast<size_t>(kMaxRank)) {
    std::vector<int64_t> shape(a.ndim());
    for (size_t d = 0; d < a.ndim(); ++d) shape[d] = a.shape(d);
    raise_rank(name, shape.data(), shape.size(), layout);
  }
  TensorRef t;
  const auto dtype = to_dtype(a.dtype(), u16_is_bf16);
  if (!dtype) raise_unsupported_dtype(name, dtype_string(a.dtype()));
  t.dtype = *dtype;
  if (a.device_type() == nb::device::cpu::value) {
    t.device = Device::cpu();
  } else if (a.device_type() == nb::device::cuda::value) {
    t.device = Device::cuda(a.device_id());
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
  normalize_empty(t);
  return t;
}

// torch's classes and dtypes, looked up once torch is imported (it never is by tileattn's core).
struct Torch {
  PyObject* tensor = nullptr;  // torch.Tensor (subclasses too: nn.Parameter, tensors that require grad)
  PyObject* float32 = nullptr;
  PyObject* float16 = nullptr;
  PyObject* bfloat16 = nullptr;
  PyObject* float64 = nullptr;
  PyObject* int32 = nullptr;
};

const Torch* torch_if_loaded() {
  static Torch torch;
  static bool found = false;
  if (found) return &torch;
  PyObject* module = PyImport_GetModule(nb::str("torch").ptr());  // only if already imported
  if (module == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  nb::object m = nb::steal(module);
  // The references are kept for the process: torch is never unloaded.
  torch.tensor = nb::object(m.attr("Tensor")).release().ptr();
  torch.float32 = nb::object(m.attr("float32")).release().ptr();
  torch.float16 = nb::object(m.attr("float16")).release().ptr();
  torch.bfloat16 = nb::object(m.attr("bfloat16")).release().ptr();
  torch.float64 = nb::object(m.attr("float64")).release().ptr();
  torch.int32 = nb::object(m.attr("int32")).release().ptr();
  found = true;
  return &torch;
}

// A plain torch tensor through its attributes: five attribute reads instead of a DLPack capsule
// (a few microseconds a tensor, which is what a decoding step's call is made of).
TensorRef from_torch(const Torch& torch, nb::handle obj, const std::string& name, const char* layout) {
  TensorRef t;
  const nb::object dtype = obj.attr("dtype");
  if (dtype.ptr() == torch.float32)
    t.dtype = DType::kFloat32;
  else if (dtype.ptr() == torch.float16)
    t.dtype = DType::kFloat16;
  else if (dtype.ptr() == torch.bfloat16)
    t.dtype = DType::kBFloat16;
  else if (dtype.ptr() == torch.float64)
    t.dtype = DType::kFloat64;
  else if (dtype.ptr() == torch.int32)
    t.dtype = DType::kInt32;
  else
    raise_unsupported_dtype(name, nb::cast<std::string>(nb::str(dtype)).substr(6));  // "torch.int32"
  if (nb::cast<bool>(obj.attr("is_cuda"))) {
    t.device = Device::cuda(nb::cast<int>(obj.attr("get_device")()));
  } else if (!nb::cast<bool>(obj.attr("is_cpu"))) {
    raise_argument_error(PyExc_ValueError, name,
                         "is on " + nb::cast<std::string>(nb::str(obj.attr("device"))) +
                             "; tileattn runs on CPU and CUDA tensors");
  }
  const nb::object shape = obj.attr("shape"), stride = obj.attr("stride")();
  const size_t ndim = nb::len(shape);
  if (ndim > static_cast<size_t>(kMaxRank)) {
    std::vector<int64_t> dims(ndim);
    for (size_t d = 0; d < ndim; ++d) dims[d] = nb::cast<int64_t>(shape[d]);
    raise_rank(name, dims.data(), ndim, layout);
  }
  t.rank = static_cast<int>(ndim);
  for (int d = 0; d < t.rank; ++d) {
    t.shape[d] = nb::cast<int64_t>(shape[d]);
    t.stride[d] = nb::cast<int64_t>(stride[d]);
  }
  t.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(obj.attr("data_ptr")()));
  normalize_empty(t);
  return t;
}

}  // namespace

void raise_argument_error(PyObject* type, const std::string& argument, const std::string& message) {
  nb::object error = nb::steal(PyObject_CallFunction(type, "s", (argument + ": " + message).c_str()));
  if (!error.is_valid()) throw nb::python_error();
  nb::setattr(error, "argument", nb::str(argument.c_str()));
  PyErr_SetObject(type, error.ptr());
  throw nb::python_error();
}

TensorRef Arrays::read(nb::handle obj, const std::string& name, bool writable, const char* layout) {
  if (const Torch* torch = torch_if_loaded();
      torch && PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(torch->tensor)))
    return from_torch(*torch, obj, name, layout);
  auto fail = [&] {
    const std::string type_name = nb::type_name(obj.type()).c_str();
    raise_argument_error(PyExc_TypeError, name,
                         "got a " + type_name + ", which is not " +
                             (writable ? "a writable array" : "an array tileattn can read") +
                             " (expected an object with __dlpack__: NumPy, PyTorch, CuPy, JAX, ...)");
  };
  if (writable) {
    nb::ndarray<> array;
    if (!nb::try_cast(obj, array, /*convert=*/false)) fail();
    outputs_.push_back(array);
    return from_dlpack(outputs_.back(), name, u16_is_bf16_, layout);
  }
  nb::ndarray<nb::ro> array;
  if (!nb::try_cast(obj, array, /*convert=*/false)) fail();
  inputs_.push_back(array);
  return from_dlpack(inputs_.back(), name, u16_is_bf16_, layout);
}

std::optional<TensorRef> Arrays::read_optional(nb::handle obj, const std::string& name, bool writable,
                                               const char* layout) {
  if (obj.is_none()) return std::nullopt;
  return read(obj, name, writable, layout);
}

}  // namespace tileattn::python
