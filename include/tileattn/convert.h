// tileattn/convert.h: element conversions for filling and reading fp16/bf16 host buffers
// (round to nearest even; NaN stays NaN).
#pragma once

#include <cstdint>

#include "tileattn/tensor.h"

namespace tileattn {

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float x);
float fp16_to_float(uint16_t bits);
uint16_t float_to_fp16(float x);

// Element i (in elements from base) of a host buffer of the given dtype, as double.
double element_as_double(const void* base, DType dtype, int64_t i);
// Writes x into element i of a host buffer of the given dtype, rounding once from float
// (from double for fp64).
void set_element(void* base, DType dtype, int64_t i, double x);

}  // namespace tileattn
