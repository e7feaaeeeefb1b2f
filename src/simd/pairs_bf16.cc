// pairs_bf16.cc: exp2_pairs_cols (simd.h) for CPUs with AVX512-BF16, compiled with
// -mavx512bf16 and used only where the CPU has it (simd.cc). The same arithmetic as the
// portable kernel's (kernels.inc: x * mul, minus base, vexp2, RNE to bf16; built, as it is, with
// -ffp-contract=off so x * mul - base stays two roundings), so the same bits;
// fewer instructions: vexp2's 2^n by VSCALEFPS instead of integer ops on the exponent, and
// each pair of rows rounded and interleaved by VCVTNE2PS2BF16 and one word permute instead of
// the integer rounding (both round to nearest even and make a NaN quiet; exp2 gives no
// denormal for the conversion to flush). The bf16 forward spends ~30% of its time here on AMX.
#include <immintrin.h>

#include <cstdint>

#include "simd/exp2_poly.h"

namespace tileattn::detail::avx512bf16 {
namespace {

// vexp2 of kernels.inc: 0 below -126 (and for -inf), NaN kept; n = round-to-nearest-even(x),
// 2^f on f = x - n in [-0.5, 0.5] by the same polynomial (exp2_poly.h), times 2^n (exact: n >= -126
// only with f >= 0, so the product is normal).
inline __m512 exp2v(__m512 x) {
  const __m512 lowest = _mm512_set1_ps(-126.0f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lowest, _CMP_LT_OQ);
  x = _mm512_mask_mov_ps(x, under, lowest);
  // (maskz: GCC 12's unmasked form reads an undefined register and warns)
  const __m512 n = _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[0]);
#pragma GCC unroll 8
  for (int k = 1; k <= kExp2Degree; ++k) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[k]));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, n);
}

}  // namespace

void exp2_pairs_cols(const float* x, int64_t rows, int64_t ld, int64_t n, float mul, const float* base,
                     float* sums, uint32_t* dst, int64_t ldd) {
  const __m512 m = _mm512_set1_ps(mul);
  // VCVTNE2PS2BF16 (b, a) gives a's 16 words, then b's: word 2c <- a's c, word 2c + 1 <- b's c.
  alignas(64) uint16_t order[32];
  for (int c = 0; c < 16; ++c)
    order[2 * c] = static_cast<uint16_t>(c), order[2 * c + 1] = static_cast<uint16_t>(16 + c);
  const __m512i interleave = _mm512_load_si512(order);
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 b = _mm512_loadu_ps(base + c);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; r += 2) {
      const __m512 e0 = exp2v(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x + r * ld + c), m), b));
      sum = _mm512_add_ps(sum, e0);
      __m512 e1 = _mm512_setzero_ps();
      if (r + 1 < rows) {
        e1 = exp2v(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x + (r + 1) * ld + c), m), b));
        sum = _mm512_add_ps(sum, e1);
      }
      const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0));
      _mm512_storeu_si512(dst + r / 2 * ldd + c, _mm512_permutexvar_epi16(interleave, words));
    }
    _mm512_storeu_ps(sums + c, sum);
  }
}

}  // namespace tileattn::detail::avx512bf16
