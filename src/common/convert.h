// convert.h: scalar fp16/bf16 <-> fp32 conversions for host code (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

#include "tileattn/tensor.h"

namespace tileattn::detail {

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}

inline uint16_t float_to_fp16(float f) {
  const _Float16 x = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

// Reads element i of a buffer of the given dtype as double.
inline double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DType::kFloat16:
      return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kInt32:
      return static_cast<const int32_t*>(base)[i];
  }
  return 0.0;
}

// Writes a double into element i of a buffer of the given dtype (rounding once).
inline void store_from_double(void* base, DType dtype, int64_t i, double x) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(x);
      break;
    case DType::kFloat64:
      static_cast<double*>(base)[i] = x;
      break;
    // double -> float -> half can double-round; fine for outputs already at fp32 accuracy.
    case DType::kFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_fp16(static_cast<float>(x));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(x));
      break;
    case DType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(x);
      break;
  }
}

}  // namespace tileattn::detail
