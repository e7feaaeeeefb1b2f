// buffer.h: an owning, contiguous buffer of one dtype on the CPU or a CUDA device, plus host fills.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "tileattn/tensor.h"

namespace tileattn::cli {

class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, int64_t numel, Device device = Device::cpu());
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * static_cast<int64_t>(dtype_size(dtype_)); }
  bool on_cpu() const { return device_.kind == DeviceKind::kCPU; }

  // A row-major view with this shape (its product must be numel()).
  TensorRef view(std::initializer_list<int64_t> shape) const;
  // Copies every byte of src (same dtype and size, any device) into this buffer.
  void copy_from(const Buffer& src);

  // Host buffers only: element i as double, and fills.
  double at(int64_t i) const;
  void fill(double value);  // rounded once to the dtype
  // Standard normal values from (seed, index): the same for any thread count or device.
  void fill_normal(uint64_t seed);

 private:
  void reset() noexcept;

  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  Device device_{};
  int64_t numel_ = 0;
};

// A buffer of the same dtype and size as `src`, on `device`, holding a copy of it.
Buffer copy_to(const Buffer& src, Device device);

}  // namespace tileattn::cli
