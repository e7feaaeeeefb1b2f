// tileattn/tensor.h: the strided tensor reference every API call takes (host-only, no CUDA headers).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tileattn {

enum class DType { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32 };

enum class DeviceKind { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  int index = 0;  // CUDA ordinal; ignored on the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceKind::kCUDA, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr int kMaxRank = 5;  // split-KV partial outputs are [splits, B, L, H, D]

// A view of memory someone else owns: pointer, dtype, device, shape and element strides.
// Strides are in elements (not bytes) and may be anything, so [B, H, L, D] storage is passed
// to a [B, L, H, D] argument as a permuted view.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};

  // A row-major (C-contiguous) view of `shape`.
  static TensorRef contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                              Device device = Device::cpu());
  // A view with explicit element strides.
  static TensorRef strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> stride, Device device = Device::cpu());

  int64_t numel() const;
  // Reorders dimensions: result dim i is this dim perm[i] (no data moves).
  TensorRef permuted(std::initializer_list<int> perm) const;
};

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);            // "fp32", "fp16", "bf16", "fp64", "int32"
std::string device_name(const Device& device);  // "cpu", "cuda:0"
std::string shape_string(const TensorRef& t);   // "[2, 128, 8, 64]"

}  // namespace tileattn
