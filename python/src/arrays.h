// arrays.h: Python array arguments as TensorRefs: plain torch tensors read through their
// attributes, every other array through DLPack; bad arguments raise errors that name them.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <vector>

#include "tileattn/tileattn.h"

namespace tileattn::python {

namespace nb = nanobind;

// A ValueError or TypeError "argument: message", with the argument also kept as the
// exception's `argument` attribute.
[[noreturn]] void raise_argument_error(PyObject* type, const std::string& argument,
                                       const std::string& message);

// Reads the array arguments of one call. DLPack imports stay alive (and so the memory they
// describe) as long as this object.
class Arrays {
 public:
  // u16_is_bf16: NumPy has no bfloat16 of its own (ml_dtypes adds one that DLPack cannot
  // export), so the Python layer passes such arrays as uint16 views and sets this flag.
  explicit Arrays(bool u16_is_bf16) : u16_is_bf16_(u16_is_bf16) {}

  // `layout` names the expected dims in a rank error, e.g. "[batch, seqlen, heads, head_dim]".
  // Outputs must be writable; nothing is ever converted or copied (a copy would be written in vain).
  TensorRef read(nb::handle obj, const std::string& name, bool writable, const char* layout);
  // None gives nullopt.
  std::optional<TensorRef> read_optional(nb::handle obj, const std::string& name, bool writable,
                                         const char* layout);

 private:
  bool u16_is_bf16_;
  std::vector<nb::ndarray<nb::ro>> inputs_;
  std::vector<nb::ndarray<>> outputs_;
};

}  // namespace tileattn::python
