// simd.h: the CPU's hot loops behind one table of function pointers, chosen once per process
// from what the CPU supports (AVX-512, AVX2+FMA, or portable vector code).
#pragma once

#include <cstdint>

#include "tileattn/tensor.h"

namespace tileattn::detail {

struct SimdKernels {
  const char* isa;  // "amx", "avx512bf16", "avx512", "avx2", "generic"
  int width;        // floats per vector: buffers' row lengths are padded to a multiple of it

  // C[M x N] (+)= A[M x K] * B[K x N] in fp32; A(i, k) = A[i * rsa + k * csa] (so A may be
  // stored transposed), B and C row-major. N must be a multiple of `width`; rows of B and C
  // must hold N floats. accumulate = false overwrites C.
  void (*gemm)(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B,
               int64_t ldb, float* C, int64_t ldc, bool accumulate);
  // out[j * out_stride] = sum over d < D of A[j * lda + d] * x[d], for j < n (decoding's scores)
  void (*dots)(const float* A, int64_t lda, int64_t n, const float* x, int64_t D, float* out,
               int64_t out_stride);
  // dots of bf16 rows (D a multiple of width), out contiguous; and o[D] += sum over j < n of
  // w[j] V[j] for bf16 rows V[j] (D a multiple of width, at most 32 widths): decoding reads bf16
  // K and V where they lie, widening in registers.
  void (*dots_bf16)(const uint16_t* A, int64_t lda, int64_t n, const float* x, int64_t D, float* out);
  void (*gemv_bf16)(int64_t n, const float* w, const uint16_t* V, int64_t ldv, float* o, int64_t D);
  // Column-wise versions for a block stored [rows][ld] with n columns (n a multiple of width):
  // out[c] = max over r of x[r][c], NaN dropped (-inf when rows == 0)
  void (*col_max)(const float* x, int64_t rows, int64_t ld, int64_t n, float* out);
  // x[r][c] = exp2(x[r][c] - base[c]) in place; sums[c] = sum over r of the new x[r][c]
  void (*exp2_cols)(float* x, int64_t rows, int64_t ld, int64_t n, const float* base, float* sums);
  // max over x[0, n), ignoring NaN (-inf when n == 0 or every entry is -inf)
  float (*row_max)(const float* x, int64_t n);
  // x[i] = exp2(x[i] - base) in place for i < n; returns the sum. exp2(-inf) is exactly 0.
  float (*exp2_sum)(float* x, int64_t n, float base);
  // The backward's row (no softcap): p[i] = exp2(s[i] * s2 - lse2), ds[i] = p[i] * (ds[i] - delta)
  // for i < n, rounded as those operations in that order (one pass; no fused multiply-add).
  void (*softmax_grad)(const float* s, float* p, float* ds, int64_t n, float s2, float lse2, float delta);
  // x[i] *= a
  void (*scale)(float* x, int64_t n, float a);
  // dst[i] = src[i * stride] * mul for i < n, from fp32, fp16 or bf16
  void (*load)(const void* src, DType dtype, int64_t stride, float* dst, int64_t n, float mul);
  // dst[i * stride] = round(src[i] * mul) for i < n, to fp32, fp16 or bf16
  void (*store)(const float* src, float mul, void* dst, DType dtype, int64_t stride, int64_t n);
  // The bf16 GEMM's operands, rounded to nearest even (NaN kept): dst[i] = the pair (a[i], b[i])
  // (b null: 0) for i < n; and dst[p] = the pair (x[2p], x[2p + 1]) for p < n_pairs.
  void (*pack_bf16)(const float* a, const float* b, int64_t n, uint32_t* dst);
  void (*pack_bf16_pairs)(const float* x, int64_t n_pairs, uint32_t* dst);
  // Two rows of bf16 as words: dst[i] = a[i] | b[i] << 16 (b null: 0) for i < n; returns whether
  // every value is finite (V's pairs of rows for O += P V on bf16).
  bool (*interleave_bf16)(const uint16_t* a, const uint16_t* b, int64_t n, uint32_t* dst);
  // exp2_cols of x * mul (multiplied, then base subtracted: the same roundings as scale and
  // then exp2_cols), the weights written as the bf16 GEMM's pairs of rows instead of into x:
  // dst[(r / 2) * ldd + c] = (w[r][c], w[r + 1][c]) rounded to nearest even (an odd last row
  // paired with 0); sums[c] = the fp32 sum of w[r][c] over r, as exp2_cols. x is left unchanged.
  void (*exp2_pairs_cols)(const float* x, int64_t rows, int64_t ld, int64_t n, float mul, const float* base,
                          float* sums, uint32_t* dst, int64_t ldd);
  // gemm over bf16 pairs, where the CPU has AVX512-BF16 (null elsewhere): K2 pairs of k;
  // A(i, kp) is the word A[i * rsa + kp * csa] holding (A(i, 2 kp), A(i, 2 kp + 1)) (low half
  // first), B [K2][ldb] words holding (B(2 kp, n), B(2 kp + 1, n)); N a multiple of 16.
  void (*gemm_bf16)(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t rsa, int64_t csa,
                    const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) = nullptr;
  // Decoding over a block of n positions of `heads` KV heads, in address order (position, then
  // head), K and V fp32 or bf16 (D a multiple of width): row r = h * rows + i of query heads
  // sharing KV head h gets s[r * ld_s + j] = K(j, h) . q[r * D] with K(j, h) at K + j * k_pos +
  // h * k_head elements; and o[r * ld_o + d] += sum over j of w[r * ld_w + j] V(j, h)[d].
  void (*dots_heads)(const void* K, bool bf16, int64_t k_pos, int64_t k_head, int64_t n, int64_t heads,
                     int64_t rows, const float* q, int64_t D, float* s, int64_t ld_s);
  void (*axpy_heads)(const void* V, bool bf16, int64_t v_pos, int64_t v_head, int64_t n, int64_t heads,
                     int64_t rows, const float* w, int64_t ld_w, float* o, int64_t ld_o, int64_t D);
  // gemm_bf16 runs on AMX tiles: fast enough that the forward takes bf16 through it too (on
  // AVX512-BF16 alone the forward's fp32 GEMM over widened values measured faster).
  bool amx = false;
};

// The best table this CPU runs; TILEATTN_CPU_ISA=generic|avx2|avx512|avx512bf16|amx caps it (tests).
const SimdKernels& simd();
const SimdKernels* simd_for(const char* isa);  // null when this CPU cannot run it

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The row pitch, in floats, of an fp32 tile of n columns that the GEMM reads in panels narrower
// than a row (gemm's micro-kernel takes kNV vectors of B and C at a time): whole 64-byte lines,
// an odd number of them. Rows an even number of lines apart leave some of the L1's sets unused
// (512-byte rows: half of them), so a B panel the micro-kernels read over and over no longer
// fits; an odd pitch spreads the panel's rows over every set.
inline int64_t line_pitch(int64_t n) {
  const int64_t ld = round_up(n, 16);
  return ld / 16 % 2 ? ld : ld + 16;
}

}  // namespace tileattn::detail
