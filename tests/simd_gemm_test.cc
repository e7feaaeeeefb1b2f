// simd_gemm_test.cc: the bf16 GEMMs of every SIMD table this CPU runs (AVX512-BF16's dot
// products, AMX tiles) against the same products summed in fp64, off the 16 x 16 grid in M and
// in k pairs, A in rows and transposed (csa != 1), overwriting and accumulating. bf16 x bf16 is
// exact in fp32, so the only error is fp32 accumulation's: bounded by K |a||b| 2^-22 here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "simd/simd.h"

namespace tileattn::detail {
namespace {

uint16_t bf16_of(float x) {  // inputs are exact in bf16 (a few mantissa bits)
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}
float float_of(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float x = 0;
  std::memcpy(&x, &u, 4);
  return x;
}
uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t{lo} | uint32_t{hi} << 16; }

TEST(SimdGemmBf16, EveryTableMatchesFp64) {
  for (const char* isa : {"amx", "avx512bf16"}) {
    const SimdKernels* k = simd_for(isa);
    if (k == nullptr || k->gemm_bf16 == nullptr) continue;
    for (int64_t M : {1, 15, 16, 17, 32, 33, 48, 64, 70})
      for (int64_t K2 : {1, 15, 16, 17, 32, 40, 64})
        for (int64_t N : {16, 32, 48, 128})
          for (bool transposed : {false, true})
            for (bool accumulate : {false, true}) {
              SCOPED_TRACE(std::string(isa) + " M " + std::to_string(M) + " K2 " + std::to_string(K2) +
                           " N " + std::to_string(N) + (transposed ? " A^T" : "") +
                           (accumulate ? " +=" : ""));
              const auto value = [](int64_t i, int64_t j, int salt) {  // small integers / 8: exact
                return static_cast<float>(((i * 7 + j * 13 + salt * 5) % 17) - 8) / 8.0f;
              };
              // A(i, kp) at A[i * rsa + kp * csa]; B [K2][ldb] with ldb > N; C [M][ldc].
              const int64_t rsa = transposed ? 1 : K2 + 3, csa = transposed ? M + 2 : 1, ldb = N + 16,
                            ldc = N + 8;
              std::vector<uint32_t> A(transposed ? K2 * csa : M * rsa, 0xFFFFFFFFu), B(K2 * ldb, 0xFFFFFFFFu);
              std::vector<float> C(M * ldc, std::nanf("")), want(M * N);
              for (int64_t i = 0; i < M; ++i)
                for (int64_t p = 0; p < K2; ++p)
                  A[i * rsa + p * csa] = pair(bf16_of(value(i, 2 * p, 1)), bf16_of(value(i, 2 * p + 1, 1)));
              for (int64_t p = 0; p < K2; ++p)
                for (int64_t n = 0; n < N; ++n)
                  B[p * ldb + n] = pair(bf16_of(value(2 * p, n, 2)), bf16_of(value(2 * p + 1, n, 2)));
              for (int64_t i = 0; i < M; ++i)
                for (int64_t n = 0; n < N; ++n) {
                  double sum = accumulate ? value(i, n, 3) : 0.0;
                  if (accumulate) C[i * ldc + n] = value(i, n, 3);
                  for (int64_t p = 0; p < K2; ++p) {
                    const uint32_t a = A[i * rsa + p * csa], b = B[p * ldb + n];
                    sum += double{float_of(a & 0xFFFF)} * float_of(b & 0xFFFF) +
                           double{float_of(a >> 16)} * float_of(b >> 16);
                  }
                  want[i * N + n] = static_cast<float>(sum);
                }
              k->gemm_bf16(M, N, K2, A.data(), rsa, csa, B.data(), ldb, C.data(), ldc, accumulate);
              for (int64_t i = 0; i < M; ++i) {
                for (int64_t n = 0; n < N; ++n)
                  ASSERT_NEAR(C[i * ldc + n], want[i * N + n], 2 * K2 * 1e-6) << "row " << i << " col " << n;
                for (int64_t n = N; n < ldc; ++n) ASSERT_TRUE(std::isnan(C[i * ldc + n])) << "wrote past N";
              }
            }
  }
}

// interleave_bf16 of every table: the words, nothing written past n, and the finite flag for an
// inf or NaN of either row in the vector body and in the tail.
TEST(SimdInterleaveBf16, EveryTableWordsAndFiniteFlag) {
  for (const char* isa : {"amx", "avx512bf16", "avx512", "avx2", "generic"}) {
    const SimdKernels* k = simd_for(isa);
    if (k == nullptr) continue;
    for (int64_t n : {1, 7, 16, 33, 128}) {
      for (int bad = -1; bad < 4; ++bad) {  // -1: none; 0/1: row a, b at 0; 2/3: a, b at n - 1
        std::vector<uint16_t> a(n), b(n);
        for (int64_t i = 0; i < n; ++i)
          a[i] = bf16_of(0.25f * (i % 9) - 1), b[i] = bf16_of(0.5f * (i % 5) + 3);
        if (bad >= 0) (bad % 2 == 0 ? a : b)[bad < 2 ? 0 : n - 1] = bad < 2 ? 0x7F80 : 0xFFC1;  // inf, NaN
        for (bool second : {true, false}) {
          std::vector<uint32_t> dst(n + 3, 0xDEADBEEFu);
          const bool finite = k->interleave_bf16(a.data(), second ? b.data() : nullptr, n, dst.data());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], pair(a[i], second ? b[i] : 0)) << isa << " " << i;
          for (int64_t i = n; i < n + 3; ++i) ASSERT_EQ(dst[i], 0xDEADBEEFu) << isa << " wrote past n";
          const bool want = bad < 0 || (!second && bad % 2 == 1);
          EXPECT_EQ(finite, want) << isa << " n " << n << " bad " << bad << " second " << second;
        }
      }
    }
  }
}

// exp2_pairs_cols of every table: the same bits as scale, exp2_cols and pack_bf16 one after
// another (the passes it replaces), odd row counts and -inf (masked) entries included, x unchanged.
TEST(SimdExp2PairsCols, EveryTableSameBitsAsThePassesItReplaces) {
  for (const char* isa : {"amx", "avx512bf16", "avx512", "avx2", "generic"}) {
    const SimdKernels* k = simd_for(isa);
    if (k == nullptr) continue;
    const int64_t n = 2 * k->width, ld = n + k->width;
    for (int64_t rows : {1, 2, 5, 16}) {
      std::vector<float> x(rows * ld), base(n), sums(n), want_sums(n);
      for (int64_t i = 0; i < rows * ld; ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * 9;
      x[0] = -INFINITY;
      for (int64_t c = 0; c < n; ++c) base[c] = 0.25f * static_cast<float>(c % 7) - 1;
      const float mul = 1.3f;
      std::vector<float> y = x;
      k->scale(y.data(), rows * ld, mul);
      k->exp2_cols(y.data(), rows, ld, n, base.data(), want_sums.data());
      std::vector<uint32_t> want((rows + 1) / 2 * ld, 0), got(want.size(), 0);
      for (int64_t r = 0; r < rows; r += 2)
        k->pack_bf16(&y[r * ld], r + 1 < rows ? &y[(r + 1) * ld] : nullptr, n, &want[r / 2 * ld]);
      const std::vector<float> x0 = x;
      k->exp2_pairs_cols(x.data(), rows, ld, n, mul, base.data(), sums.data(), got.data(), ld);
      EXPECT_EQ(got, want) << isa << " rows " << rows;
      EXPECT_EQ(0, std::memcmp(sums.data(), want_sums.data(), n * 4)) << isa << " rows " << rows;
      EXPECT_EQ(0, std::memcmp(x.data(), x0.data(), x.size() * 4)) << isa;
    }
  }
}

}  // namespace
}  // namespace tileattn::detail
