// exp2_poly.h: the polynomial behind every exp2 of the SIMD kernels: 2^f for f in [-0.5, 0.5]
// as p(f) = sum c_k f^k, c_k = ln2^k / k! (degree 7), evaluated by Horner from the highest
// coefficient with fused multiply-adds. vexp2 (kernels.inc) and the AVX512-BF16 weights' pass
// (pairs_bf16.cc) share it: they must give the same bits.
#pragma once

namespace tileattn::detail {

inline constexpr int kExp2Degree = 7;
// kExp2Poly[i] = c_(7 - i): highest degree first, in Horner's order.
inline constexpr float kExp2Poly[kExp2Degree + 1] = {
    1.5252733804059841e-05f, 1.5403530393381606e-04f, 1.3333558146428443e-03f, 9.6181291076284772e-03f,
    5.5504108664821580e-02f, 2.4022650695910071e-01f, 6.9314718055994531e-01f, 1.0f};

}  // namespace tileattn::detail
