// eager.cc: standard attention as a framework runs it eagerly, three passes over memory:
//   1. S = scale Q K^T            -> an [B, Hq, Lq, Lk] tensor in the working dtype
//   2. P = softmax(mask(cap(S)))  -> another [B, Hq, Lq, Lk] tensor (computed in fp32)
//   3. O = P V
// The GEMMs use the same SIMD micro-kernel as the tiled path, so the two differ in memory
// traffic, not in arithmetic skill.
#include <omp.h>

#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "reference/reference.h"
#include "simd/simd.h"
#include "tileattn/error.h"

namespace tileattn::detail::reference {
namespace {

constexpr int64_t kRowBlock = 64;  // rows per parallel step

// Key/value row j of a kv head as fp32: into dst[j * ld] (dst[d * ld + j] when transposed).
void pack_kv_row(const AttnParams& p, const void* base, const Strides4& st, int64_t b, int64_t hk, int64_t j,
                 bool transpose, int64_t ld, float* dst, float* row) {
  const SimdKernels& simd = detail::simd();
  const int64_t D = p.head_dim, off = b * st.b + j * st.l + hk * st.h;
  if (!transpose) {
    simd.load(element_ptr(base, p.dtype, off), p.dtype, st.d, dst + j * ld, D, 1.0f);
    return;
  }
  simd.load(element_ptr(base, p.dtype, off), p.dtype, st.d, row, D, 1.0f);
  for (int64_t d = 0; d < D; ++d) dst[d * ld + j] = row[d];
}

}  // namespace

int64_t eager(const AttnParams& p) {
  const SimdKernels& simd = detail::simd();
  const int64_t B = p.batch, H = p.heads_q, Lq = p.seqlen_q, Lk = p.seqlen_k, D = p.head_dim;
  const int64_t W = simd.width, Dp = round_up(D, W), Lkp = round_up(Lk, W);
  const int64_t elt = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t sp_elems = B * H * Lq * Lk;
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
  if (B == 0 || Lq == 0) return 0;

  std::unique_ptr<char[]> s_mem, p_mem;
  try {
    s_mem.reset(new char[sp_elems * elt]);
    p_mem.reset(new char[sp_elems * elt]);
  } catch (const std::bad_alloc&) {
    throw RuntimeError("eager: cannot allocate S and P (" + std::to_string(2 * sp_elems * elt) + " bytes)");
  }
  auto sp_row = [&](char* base, int64_t b, int64_t h, int64_t i) {
    return base + ((b * H + h) * Lq + i) * Lk * elt;
  };
  const int64_t g = p.group_size(), blocks = (Lq + kRowBlock - 1) / kRowBlock;
  std::vector<float> packed(std::max(D * Lkp, Lk * Dp));

  // Pass 1: S = scale Q K^T. Per kv head: pack K^T (rows split over threads), then every
  // (query head of the group, row block) is one GEMM into S.
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> row(D), q(kRowBlock * D), s(kRowBlock * Lkp);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
#pragma omp for schedule(static)
        for (int64_t j = 0; j < Lk; ++j)
          pack_kv_row(p, p.k, p.k_stride, b, hk, j, true, Lkp, packed.data(), row.data());
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < g * blocks; ++item) {
          const int64_t h = hk * g + item / blocks, i0 = (item % blocks) * kRowBlock;
          const int64_t n = std::min(kRowBlock, Lq - i0);
          for (int64_t r = 0; r < n; ++r)
            simd.load(
                element_ptr(p.q, p.dtype, b * p.q_stride.b + (i0 + r) * p.q_stride.l + h * p.q_stride.h),
                p.dtype, p.q_stride.d, q.data() + r * D, D, p.scale);
          simd.gemm(n, Lkp, D, q.data(), D, 1, packed.data(), Lkp, s.data(), Lkp, false);
          for (int64_t r = 0; r < n; ++r)
            simd.store(s.data() + r * Lkp, 1.0f, sp_row(s_mem.get(), b, h, i0 + r), p.dtype, 1, Lk);
        }  // the implicit barrier keeps `packed` until every GEMM of this kv head is done
      }
  }

  // Pass 2: P = softmax(S), row by row in fp32, with softcap and the mask applied on the way.
  const WindowMask mask{Lk, Lk - Lq, p.window_left, p.window_right};
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t bhi = 0; bhi < B * H * Lq; ++bhi) {
    const int64_t i = bhi % Lq, h = (bhi / Lq) % H, b = bhi / (Lq * H);
    std::vector<float> x(Lk);
    simd.load(sp_row(s_mem.get(), b, h, i), p.dtype, 1, x.data(), Lk, 1.0f);
    const int64_t lo = mask.lo(i), hi = mask.hi(i);
    for (int64_t j = 0; j < Lk; ++j) {
      float s = x[j];
      if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
      x[j] = (j < lo || j >= hi) ? -INFINITY : s * kLog2e;
    }
    const float m = simd.row_max(x.data(), Lk);
    const bool empty = m == -INFINITY;  // every key masked: P = 0, O = 0, LSE = -inf
    const float sum = empty ? 0.0f : simd.exp2_sum(x.data(), Lk, m);
    if (empty) std::fill(x.begin(), x.end(), 0.0f);
    simd.store(x.data(), empty ? 0.0f : 1.0f / sum, sp_row(p_mem.get(), b, h, i), p.dtype, 1, Lk);
    if (p.lse)
      static_cast<float*>(p.lse)[b * p.lse_stride.b + h * p.lse_stride.h + i * p.lse_stride.l] =
          empty ? -INFINITY : (m + std::log2(sum)) * kLn2;
  }

  // Pass 3: O = P V, organized as pass 1.
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> pr(kRowBlock * Lkp), o(kRowBlock * Dp);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
#pragma omp for schedule(static)
        for (int64_t j = 0; j < Lk; ++j)
          pack_kv_row(p, p.v, p.v_stride, b, hk, j, false, Dp, packed.data(), nullptr);
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < g * blocks; ++item) {
          const int64_t h = hk * g + item / blocks, i0 = (item % blocks) * kRowBlock;
          const int64_t n = std::min(kRowBlock, Lq - i0);
          for (int64_t r = 0; r < n; ++r)
            simd.load(sp_row(p_mem.get(), b, h, i0 + r), p.dtype, 1, pr.data() + r * Lkp, Lk, 1.0f);
          simd.gemm(n, Dp, Lk, pr.data(), Lkp, 1, packed.data(), Dp, o.data(), Dp, false);
          for (int64_t r = 0; r < n; ++r)
            simd.store(
                o.data() + r * Dp, 1.0f,
                const_cast<char*>(element_ptr(
                    p.out, p.out_dtype, b * p.out_stride.b + (i0 + r) * p.out_stride.l + h * p.out_stride.h)),
                p.out_dtype, p.out_stride.d, D);
        }
      }
  }
  return 2 * sp_elems * elt;
}

}  // namespace tileattn::detail::reference
