// gemm_amx.cc: the bf16 GEMM of simd.h (gemm_bf16) on AMX tiles (TDPBF16PS: bf16 pairs
// multiplied and summed into fp32, 16 x 16 fp32 results a tile), compiled with -mamx-tile
// -mamx-bf16 and used only where the CPU has AMX and the OS grants its tile state (simd.cc).
// Blocks of 32 x 32 of C (four tiles) over chunks of 16 k pairs; A's rows of a block are first
// copied into a buffer of 32 rows x K2 words (A may be stored transposed: csa != 1, then by
// 16 x 16 AVX-512 transposes where its rows are contiguous, rsa == 1), B's rows
// are read in place (they are already pairs of k, the layout TDPBF16PS takes). A last block of
// fewer than 16 or 32 rows runs on tiles too, through zero rows; pairs past the last chunk of 16
// run on the AVX512-BF16 GEMM.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/aligned.h"

namespace tileattn::detail::avx512bf16 {
void gemm_bf16(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t rsa, int64_t csa,
               const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);
}

namespace tileattn::detail::amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: C (16 rows x 16 floats); 4, 5: A (16 rows x 16 pairs); 6, 7: B (16 pairs x 16 columns).
void configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}

// C[16 kTwoM rows x 16 kTwoN columns] (+)= A B over k2 pairs (chunks of 16) with a: the block's
// rows of A (lda words a row), b: B's first pair row and columns (ldb words), c: C's block.
// Tiles 0, 1 (2, 3): C's first (second) 16 rows; 4 (5): A's; 6, 7: B's two 16 columns.
template <bool kTwoM, bool kTwoN>
void block(int64_t k2, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c, int64_t ldc,
           bool accumulate) {
  const int64_t cs = ldc * 4, as = lda * 4, bs = ldb * 4;
  if (accumulate) {
    _tile_loadd(0, c, cs);
    if (kTwoN) _tile_loadd(1, c + 16, cs);
    if (kTwoM) _tile_loadd(2, c + 16 * ldc, cs);
    if (kTwoM && kTwoN) _tile_loadd(3, c + 16 * ldc + 16, cs);
  } else {
    _tile_zero(0);
    if (kTwoN) _tile_zero(1);
    if (kTwoM) _tile_zero(2);
    if (kTwoM && kTwoN) _tile_zero(3);
  }
  for (int64_t k = 0; k < k2; k += 16) {
    _tile_loadd(4, a + k, as);
    if (kTwoM) _tile_loadd(5, a + 16 * lda + k, as);
    _tile_loadd(6, b + k * ldb, bs);
    _tile_dpbf16ps(0, 4, 6);
    if (kTwoM) _tile_dpbf16ps(2, 5, 6);
    if (kTwoN) {
      _tile_loadd(7, b + k * ldb + 16, bs);
      _tile_dpbf16ps(1, 4, 7);
      if (kTwoM) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, cs);
  if (kTwoN) _tile_stored(1, c + 16, cs);
  if (kTwoM) _tile_stored(2, c + 16 * ldc, cs);
  if (kTwoM && kTwoN) _tile_stored(3, c + 16 * ldc + 16, cs);
}

// dst[c][r] = src[r][c] for a 16 x 16 block of words (rows lds and ldd words apart): 32-bit,
// then 64-bit interleaves of row pairs, then two rounds of 128-bit lane shuffles.
void transpose16(const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd) {
  __m512i r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * lds);
  for (int i = 0; i < 16; i += 2)
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  for (int g = 0; g < 16; g += 4) {  // u[g + j]: rows g..g + 3 at columns j, j + 4, j + 8, j + 12
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]), u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]),
          u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88),
                  v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    _mm512_storeu_si512(dst + j * ldd, _mm512_shuffle_i32x4(v0, v2, 0x88));
    _mm512_storeu_si512(dst + (j + 8) * ldd, _mm512_shuffle_i32x4(v0, v2, 0xdd));
    _mm512_storeu_si512(dst + (j + 4) * ldd, _mm512_shuffle_i32x4(v1, v3, 0x88));
    _mm512_storeu_si512(dst + (j + 12) * ldd, _mm512_shuffle_i32x4(v1, v3, 0xdd));
  }
}

}  // namespace

void gemm_bf16(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t rsa, int64_t csa,
               const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  const int64_t k_main = K2 / 16 * 16;
  if (k_main == 0 || M == 0 || N == 0) {
    avx512bf16::gemm_bf16(M, N, K2, A, rsa, csa, B, ldb, C, ldc, accumulate);
    return;
  }
  // A block's rows of A (k_main words each, rows past M zero) and, for the last block when M is
  // not a multiple of 16, C's rows through a 16-row buffer: every row takes the same tile
  // arithmetic whatever M is (the forward's tile height follows the thread count).
  thread_local AlignedVector<uint32_t> rows_buf;
  thread_local AlignedVector<float> c_buf;
  rows_buf.resize(32 * k_main);
  configure();
  for (int64_t m0 = 0; m0 < M; m0 += 32) {
    const int64_t m_rows = std::min<int64_t>(32, M - m0);
    const bool two_m = m_rows > 16, whole = m_rows % 16 == 0;
    // Whole blocks of A stored in rows are read in place; the others are copied first.
    const bool in_place = csa == 1 && whole;
    const uint32_t* a_rows = in_place ? A + m0 * rsa : rows_buf.data();
    const int64_t a_ld = in_place ? rsa : k_main;
    int64_t i = 0;
    if (!in_place && rsa == 1)  // A stored transposed with its rows contiguous: 16 x 16 blocks
      for (; i + 16 <= m_rows; i += 16)
        for (int64_t k = 0; k < k_main; k += 16)
          transpose16(A + m0 + i + k * csa, csa, rows_buf.data() + i * k_main + k, k_main);
    for (; i < m_rows && !in_place; ++i) {
      const uint32_t* src = A + (m0 + i) * rsa;
      uint32_t* dst = rows_buf.data() + i * k_main;
      if (csa == 1)
        std::memcpy(dst, src, k_main * 4);
      else
        for (int64_t k = 0; k < k_main; ++k) dst[k] = src[k * csa];
    }
    if (m_rows < 32 && !in_place)
      std::fill(rows_buf.begin() + m_rows * k_main, rows_buf.begin() + 32 * k_main, 0u);
    float* c_block = C + m0 * ldc;
    int64_t c_ld = ldc;
    if (!whole) {  // C's rows into a buffer of whole tiles (padding rows zero), back after
      c_buf.assign(32 * N, 0.0f);
      if (accumulate)
        for (int64_t i = 0; i < m_rows; ++i) std::memcpy(&c_buf[i * N], C + (m0 + i) * ldc, N * 4);
      c_block = c_buf.data(), c_ld = N;
    }
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
      const bool two_n = n0 + 32 <= N;
      float* c = c_block + n0;
      const bool acc = accumulate || !whole;
      if (two_m && two_n)
        block<true, true>(k_main, a_rows, a_ld, B + n0, ldb, c, c_ld, acc);
      else if (two_m)
        block<true, false>(k_main, a_rows, a_ld, B + n0, ldb, c, c_ld, acc);
      else if (two_n)
        block<false, true>(k_main, a_rows, a_ld, B + n0, ldb, c, c_ld, acc);
      else
        block<false, false>(k_main, a_rows, a_ld, B + n0, ldb, c, c_ld, acc);
    }
    if (!whole)
      for (int64_t i = 0; i < m_rows; ++i) std::memcpy(C + (m0 + i) * ldc, &c_buf[i * N], N * 4);
  }
  _tile_release();
  if (k_main < K2)  // the last pairs, added on
    avx512bf16::gemm_bf16(M, N, K2 - k_main, A + k_main * csa, rsa, csa, B + k_main * ldb, ldb, C, ldc, true);
}

}  // namespace tileattn::detail::amx
