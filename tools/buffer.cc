// buffer.cc: owning buffers on the CPU or a CUDA device; host fills for inputs and poison.
#include "buffer.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numbers>
#include <utility>

#include "gpu_runtime.h"
#include "tileattn/convert.h"
#include "tileattn/error.h"

namespace tileattn::cli {
namespace {

constexpr std::size_t kAlign = 64;  // one cache line, and what an AVX-512 load likes

// splitmix64: a counter-based generator, so element i's value depends only on (seed, i).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Buffer::Buffer(DType dtype, int64_t numel, Device device) : dtype_(dtype), device_(device), numel_(numel) {
  const std::size_t size = static_cast<std::size_t>(bytes());
  if (on_cpu()) {
    data_ = std::aligned_alloc(kAlign, (size + kAlign - 1) / kAlign * kAlign + kAlign);
    if (!data_) throw RuntimeError("cannot allocate " + std::to_string(size) + " bytes of host memory");
  } else {
    data_ = gpu::allocate(size, device.index);
  }
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      device_(other.device_),
      numel_(std::exchange(other.numel_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    dtype_ = other.dtype_;
    device_ = other.device_;
    numel_ = std::exchange(other.numel_, 0);
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (!data_) return;
  if (on_cpu())
    std::free(data_);
  else
    gpu::release(data_);
  data_ = nullptr;
}

TensorRef Buffer::view(std::initializer_list<int64_t> shape) const {
  return TensorRef::contiguous(data_, dtype_, shape, device_);
}

void Buffer::copy_from(const Buffer& src) {
  if (src.dtype_ != dtype_ || src.numel_ != numel_)
    throw RuntimeError("copy between buffers of different dtype or size");
  const std::size_t size = static_cast<std::size_t>(bytes());
  if (on_cpu() && src.on_cpu())
    std::memcpy(data_, src.data_, size);
  else if (on_cpu())
    gpu::copy_to_host(data_, src.data_, size);
  else if (src.on_cpu())
    gpu::copy_to_device(data_, src.data_, size);
  else
    throw RuntimeError("device-to-device copies are not needed by the tool");
}

double Buffer::at(int64_t i) const { return element_as_double(data_, dtype_, i); }

void Buffer::fill(double value) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < numel_; ++i) set_element(data_, dtype_, i, static_cast<float>(value));
}

void Buffer::fill_normal(uint64_t seed) {
  // Box-Muller on two 32-bit uniforms from one hash; u1 is in (0, 1], so log() is finite.
  const uint64_t key = mix(seed);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < numel_; ++i) {
    const uint64_t r = mix(key ^ static_cast<uint64_t>(i));
    const double u1 = (static_cast<double>(r >> 32) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(r & 0xffffffffu) / 4294967296.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    set_element(data_, dtype_, i, static_cast<float>(z));
  }
}

Buffer copy_to(const Buffer& src, Device device) {
  Buffer dst(src.dtype(), src.numel(), device);
  dst.copy_from(src);
  return dst;
}

}  // namespace tileattn::cli
