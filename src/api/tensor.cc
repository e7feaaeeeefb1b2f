// tensor.cc: TensorRef helpers and names.
#include "tileattn/tensor.h"

#include <sstream>
#include <vector>

#include "tileattn/error.h"
#include "tileattn/options.h"
#include "tileattn/version.h"

namespace tileattn {

TensorRef TensorRef::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                Device device) {
  if (shape.size() > kMaxRank)
    throw Error("shape", "rank " + std::to_string(shape.size()) + " > " + std::to_string(kMaxRank));
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorRef TensorRef::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                             std::initializer_list<int64_t> stride, Device device) {
  if (shape.size() > kMaxRank || shape.size() != stride.size())
    throw Error("stride", "needs one stride per dimension (" + std::to_string(shape.size()) + " dims, " +
                              std::to_string(stride.size()) + " strides)");
  TensorRef t = contiguous(data, dtype, shape, device);
  int i = 0;
  for (int64_t s : stride) t.stride[i++] = s;
  return t;
}

namespace {
// A rank set by hand may be anything; never index shape past its storage.
int valid_rank(int rank) { return rank < 0 ? 0 : rank > kMaxRank ? kMaxRank : rank; }
}  // namespace

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int d = 0; d < valid_rank(rank); ++d) n *= shape[d];
  return n;
}

TensorRef TensorRef::permuted(std::initializer_list<int> perm) const {
  if (static_cast<int>(perm.size()) != rank || rank != valid_rank(rank))
    throw Error("perm", "has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  TensorRef t = *this;
  int i = 0;
  unsigned seen = 0;
  for (int p : perm) {
    if (p < 0 || p >= rank) throw Error("perm", "entry " + std::to_string(p) + " out of range");
    if (seen & (1u << p)) throw Error("perm", "entry " + std::to_string(p) + " appears twice");
    seen |= 1u << p;
    t.shape[i] = shape[p];
    t.stride[i] = stride[p];
    ++i;
  }
  return t;
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat64:
      return "fp64";
    case DType::kInt32:
      return "int32";
  }
  return "?";
}

std::string device_name(const Device& device) {
  if (device.kind == DeviceKind::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

std::string shape_string(const TensorRef& t) {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < valid_rank(t.rank); ++d) os << (d ? ", " : "") << t.shape[d];
  os << ']';
  return os.str();
}

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::kAuto:
      return "auto";
    case Kernel::kCpuTiled:
      return "cpu";
    case Kernel::kCudaSm80:
      return "sm80";
    case Kernel::kCudaSm90:
      return "sm90";
  }
  return "?";
}

const char* version() { return "0.1.0"; }

}  // namespace tileattn
