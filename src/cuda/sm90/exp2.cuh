// exp2.cuh: exp2 on the FMA pipe (FA4's trick: part of a softmax's exponentials off the exp unit).
#pragma once

namespace tileattn::detail::sm90 {

// 2^x on the FMA pipe, for the softmax's arguments (x <= 8 under conditional rescaling, -inf
// for a masked score; any x < 128 works):
// x = n + f with n = floor(x), 2^f on [0, 1) by a cubic (relative error < 9e-5, far below the
// bf16/fp16 rounding of P), n added to the exponent bits. Below -126 (ex2.approx.ftz's zero
// range too) the weight is exactly 0, so masked scores add nothing to l; NaN stays NaN.
__device__ __forceinline__ float exp2_fma(float x) {
  const float n = floorf(fmaxf(x, -127.0f));
  const float f = fmaxf(x, -127.0f) - n;
  const float p = fmaf(fmaf(fmaf(0.07706618f, f, 0.22764593f), f, 0.69511658f), f, 1.0f);
  const float y = __int_as_float(__float_as_int(p) + (static_cast<int>(n) << 23));
  if (x < -126.0f) return 0.0f;
  return x >= -126.0f ? y : x;
}

}  // namespace tileattn::detail::sm90
