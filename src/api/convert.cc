// convert.cc: the public element conversions, over the library's inline ones.
#include "tileattn/convert.h"

#include "common/convert.h"

namespace tileattn {

float bf16_to_float(uint16_t bits) { return detail::bf16_to_float(bits); }
uint16_t float_to_bf16(float x) { return detail::float_to_bf16(x); }
float fp16_to_float(uint16_t bits) { return detail::fp16_to_float(bits); }
uint16_t float_to_fp16(float x) { return detail::float_to_fp16(x); }
double element_as_double(const void* base, DType dtype, int64_t i) {
  return detail::load_as_double(base, dtype, i);
}
void set_element(void* base, DType dtype, int64_t i, double x) {
  detail::store_from_double(base, dtype, i, x);
}

}  // namespace tileattn
