// cpu_backward.cc: FlashAttention-2's backward on the CPU. For each (sequence, KV head), its keys
// and values once as fp32, then for each of its query heads and each block of 64 query rows:
//   S = Q K^T (recomputed), P = exp(scale S - lse) (from the forward's LSE: no second softmax),
//   dV += P^T dO, dP = dO V^T, dS = P (dP - D) with D = rowsum(dO * O) (softcap: 1 - tanh^2),
//   dQ = scale dS K (written when the row block is done), dK += scale dS^T Q,
// over the key blocks the mask leaves the row block; dK and dV are written once the KV head's
// query heads are all done (GQA sums them there). A key a row does not see contributes to
// neither's gradient, NaN included: a partly masked block goes through the whole-block GEMMs
// (P and dS zero where hidden) only while the operands they multiply by those zeros (the
// block's K rows, the row block's Q and dO) are finite, else it multiplies the visible spans.
// Blocks of 128 x 128: on AMX tiles 1.1-1.2x blocks of 64 (fewer C tile loads and stores a
// product), on AVX-512 alike.
#include "cpu/cpu_backward.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/aligned.h"
#include "common/convert.h"
#include "common/mask.h"
#include "common/online_softmax.h"
#include "cpu/prefetch.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {
namespace {

constexpr int64_t kBlockQ = 128, kBlockK = 128;
constexpr int64_t kTr = 16;  // keys a step of K's and V's transposition (a divisor of kBlockK)

struct Workspace {
  // fp32, [rows][pitch]: Dp columns Dl apart, Bc columns Bl apart (line_pitch, simd.h).
  // The KV head: K [Lk][Dl], dK, dV [Lk][Dl]; K^T and V^T a key block at a time, [nk][D][Bl]
  // (nk = ceil(Lk / Bc); one block's B operand in 18 pages at D = 128, not 128).
  AlignedVector<float> kf, kt, vt, dk, dv;
  AlignedVector<float> q, dout, dq;       // a row block: [Br][Dl]
  AlignedVector<float> s, prob, ds;       // [Br][Bl]
  AlignedVector<float> lse2, delta, row;  // [Br]: the LSE in log2 units, rowsum(dO * O); one row
  AlignedVector<float> vb;                // [kTr][Dl]: V's rows on their way into V^T
  std::vector<char> k_finite;             // per key block: its K rows hold no inf or NaN
  // The bf16 GEMMs' operands as words of two bf16 (simd gemm_bf16): K^T, V^T pairs along d
  // [nk][D/2][Bl]; K pairs along keys [Lk/2][Dp]; Q, dO pairs along d [Br][D/2] and along rows
  // [Br/2][Dp]; dS pairs along keys [Br][Bc/2]; dS, P pairs along rows [Br/2][Bc].
  AlignedVector<uint32_t> ktw, vtw, kw, qw, dow, qpw, dopw, dsw, dstw, ptw;

  void reserve(int64_t lk, int64_t nk, int64_t d, int64_t dp, int64_t dl, int64_t bl) {
    kf.assign(lk * dl, 0.0f), kt.assign(nk * d * bl, 0.0f), vt.assign(nk * d * bl, 0.0f);
    dk.assign(lk * dl, 0.0f), dv.assign(lk * dl, 0.0f);
    q.assign(kBlockQ * dl, 0.0f), dout.assign(kBlockQ * dl, 0.0f), dq.assign(kBlockQ * dl, 0.0f);
    s.assign(kBlockQ * bl, 0.0f), prob.assign(kBlockQ * bl, 0.0f), ds.assign(kBlockQ * bl, 0.0f);
    lse2.assign(kBlockQ, 0.0f), delta.assign(kBlockQ, 0.0f), row.assign(dp, 0.0f);
    vb.assign(kTr * dl, 0.0f);
  }
  void reserve_bf16(int64_t lk, int64_t nk, int64_t d, int64_t dp, int64_t bl) {
    const int64_t d2 = (d + 1) / 2;
    ktw.assign(nk * d2 * bl, 0), vtw.assign(nk * d2 * bl, 0), kw.assign((lk + 1) / 2 * dp, 0);
    qw.assign(kBlockQ * d2, 0), dow.assign(kBlockQ * d2, 0), qpw.assign(kBlockQ / 2 * dp, 0);
    dopw.assign(kBlockQ / 2 * dp, 0), dsw.assign(kBlockQ * kBlockK / 2, 0),
        dstw.assign(kBlockK * kBlockQ / 2, 0);
    ptw.assign(kBlockK * kBlockQ / 2, 0);
  }
};

// One row of a block: S (scores, unscaled) in, P = exp2(scale S log2 e - lse2) out, and dS from
// dP in place: P (dP - delta), times 1 - tanh^2 with a softcap. Keys outside [lo, hi) (hidden,
// or past the sequence) get P = dS = 0, whatever S and dP hold.
void row_grads(const SimdKernels& simd, const float* s, float* prob, float* ds, int64_t lo, int64_t hi,
               float scale, float cap, float lse2, float delta) {
  if (lo >= hi || lse2 == -INFINITY) {  // no key seen: no weight, no gradient
    std::fill(prob, prob + kBlockK, 0.0f), std::fill(ds, ds + kBlockK, 0.0f);
    return;
  }
  // Only the visible span is exponentiated; hidden P is 0 whatever lse2 is (a NaN LSE, from a
  // NaN key of this row, must not reach keys the row does not see through the block's GEMMs).
  if (cap > 0) {
    float dtanh[kBlockK];
    for (int64_t c = lo; c < hi; ++c) {
      const float t = std::tanh(s[c] * scale / cap);
      prob[c] = cap * t * kLog2e, dtanh[c] = 1.0f - t * t;
    }
    simd.exp2_sum(prob + lo, hi - lo, lse2);
    for (int64_t c = lo; c < hi; ++c) ds[c] = prob[c] * (ds[c] - delta) * dtanh[c];
  } else {  // P and dS in one pass
    simd.softmax_grad(s + lo, prob + lo, ds + lo, hi - lo, scale * kLog2e, lse2, delta);
  }
  std::fill(prob, prob + lo, 0.0f), std::fill(prob + hi, prob + kBlockK, 0.0f);
  std::fill(ds, ds + lo, 0.0f), std::fill(ds + hi, ds + kBlockK, 0.0f);
}

// Whether x[0, n) holds no inf or NaN: no exponent field all ones. On the bits, so the loop
// vectorizes (a float sum of x * 0 is a chain the compiler must keep in order).
bool all_finite(const float* x, int64_t n) {
  uint32_t top = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    top = std::max(top, u & 0x7f800000u);
  }
  return top != 0x7f800000u;
}

// The bf16 pair rows of `rows` rows of x ([rows][ld] floats, n columns): row p of dst (ld_dst
// words) pairs rows 2p and 2p + 1 (the last alone when rows is odd).
void pack_row_pairs(const SimdKernels& simd, const float* x, int64_t ld, int64_t rows, int64_t n,
                    uint32_t* dst, int64_t ld_dst) {
  for (int64_t p = 0; 2 * p < rows; ++p)
    simd.pack_bf16(x + 2 * p * ld, 2 * p + 1 < rows ? x + (2 * p + 1) * ld : nullptr, n, dst + p * ld_dst);
}

// Each row of x paired along its columns: dst row r (ld_dst words) = (x[r][2c], x[r][2c + 1]).
void pack_col_pairs(const SimdKernels& simd, const float* x, int64_t ld, int64_t rows, int64_t n_pairs,
                    uint32_t* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) simd.pack_bf16_pairs(x + r * ld, n_pairs, dst + r * ld_dst);
}

template <class Mask>
void run_kv_head(const BackwardParams& bp, const SimdKernels& simd, int64_t b, int64_t hk, Workspace& ws) {
  const AttnParams& p = bp.fwd;
  const SeqInfo seq = seq_info(p.seqs, b);
  const int64_t Lq = seq.len_q, Lk = seq.len_k, D = p.head_dim, W = simd.width;
  // The tiles' rows an odd number of lines apart (line_pitch): 576 bytes for 128 floats (fp32,
  // D = 128, L = 1k: dQ += dS K and dK += dS^T Q at 188 and 182 against 177 and 167 GFLOP/s a
  // core with rows 512 bytes apart). K^T and V^T by key blocks, [nk][D][Bl] (KT floats a
  // block): with rows across all Lk keys (4160 bytes apart at 1024) each of a block's D rows
  // was a page of its own, and S = Q K^T ran at 183 against 201-208 GFLOP/s a core.
  const int64_t Dp = round_up(D, W), Dl = line_pitch(Dp), Bl = line_pitch(kBlockK);
  const int64_t nk = (Lk + kBlockK - 1) / kBlockK, KT = D * Bl;
  const Mask mask = Mask::make(Lq, Lk, p.window_left, p.window_right);
  const float scale = p.scale, cap = p.softcap;
  ws.reserve(Lk, nk, D, Dp, Dl, Bl);
  // Rows of one head lie H x D elements apart, beyond the hardware prefetchers' reach
  // (prefetch.h): K and V's rows are prefetched kAhead rows before they are read, and a row
  // block's Q, dO and O rows in slices under the previous row block's key blocks.
  constexpr int64_t kAhead = 8;
  const auto kv_row = [&](const Strides4& st, int64_t j) { return kv_offset(p, st, b, seq.k_start + j, hk); };
  const auto prefetch_kv = [&](int64_t j0, int64_t n) {
    prefetch_rows(p.k, p.dtype, D, p.k_stride.d, n, [&](int64_t i) { return kv_row(p.k_stride, j0 + i); });
    prefetch_rows(p.v, p.dtype, D, p.v_stride.d, n, [&](int64_t i) { return kv_row(p.v_stride, j0 + i); });
  };
  prefetch_kv(0, std::min(kAhead, Lk));
  // K's rows into kf, V's into vb, kTr keys at a time; then both transposed, kTr consecutive
  // floats of a K^T and a V^T row a store (one key a store wrote one float a line).
  for (int64_t j0 = 0; j0 < Lk; j0 += kTr) {
    const int64_t n = std::min(kTr, Lk - j0), t = j0 / kBlockK * KT + j0 % kBlockK;  // kTr divides Bc
    for (int64_t j = j0; j < j0 + n; ++j) {
      if (j + kAhead < Lk) prefetch_kv(j + kAhead, 1);
      simd.load(element_ptr(p.k, p.dtype, kv_row(p.k_stride, j)), p.dtype, p.k_stride.d, &ws.kf[j * Dl], D,
                1.0f);
      simd.load(element_ptr(p.v, p.dtype, kv_row(p.v_stride, j)), p.dtype, p.v_stride.d,
                &ws.vb[(j - j0) * Dl], D, 1.0f);
    }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < n; ++j)
        ws.kt[t + d * Bl + j] = ws.kf[(j0 + j) * Dl + d], ws.vt[t + d * Bl + j] = ws.vb[j * Dl + d];
  }
  ws.k_finite.assign((Lk + kBlockK - 1) / kBlockK, 1);
  for (int64_t n = 0; n < static_cast<int64_t>(ws.k_finite.size()); ++n)
    ws.k_finite[n] = all_finite(&ws.kf[n * kBlockK * Dl], std::min(kBlockK, Lk - n * kBlockK) * Dl);
  // bf16 inputs on a CPU with AVX512-BF16: the GEMMs of whole blocks on bf16 pairs (K, V, Q and
  // dO are exact in bf16; P and dS are rounded to it, as eager autograd rounds them).
  const bool bf16 = p.dtype == DType::kBFloat16 && simd.gemm_bf16 != nullptr;
  const int64_t D2 = (D + 1) / 2, Bc2 = kBlockK / 2;
  if (bf16) {
    ws.reserve_bf16(Lk, nk, D, Dp, Bl);
    for (int64_t n = 0; n < nk; ++n) {  // K^T, V^T [nk][D/2][Bl]
      pack_row_pairs(simd, ws.kt.data() + n * KT, Bl, D, kBlockK, ws.ktw.data() + n * D2 * Bl, Bl);
      pack_row_pairs(simd, ws.vt.data() + n * KT, Bl, D, kBlockK, ws.vtw.data() + n * D2 * Bl, Bl);
    }
    pack_row_pairs(simd, ws.kf.data(), Dl, Lk, Dp, ws.kw.data(), Dp);  // K [Lk/2][Dp]
  }
  const auto store_rows = [&](void* base, const Strides4& st, int64_t row0, int64_t h, const float* src,
                              int64_t n, float mul) {
    for (int64_t r = 0; r < n; ++r)
      simd.store(src + r * Dl, mul,
                 const_cast<char*>(element_ptr(base, bp.grad_dtype, b * st.b + (row0 + r) * st.l + h * st.h)),
                 bp.grad_dtype, st.d, D);
  };

  for (int64_t h = hk * p.group_size(); h < (hk + 1) * p.group_size(); ++h)
    for (int64_t i0 = 0; i0 < Lq; i0 += kBlockQ) {
      const int64_t rows = std::min(kBlockQ, Lq - i0);
      // The row block: Q, dO, D = rowsum(dO * O) and the LSE (log2 units; -inf: no key seen).
      std::fill(ws.q.begin(), ws.q.end(), 0.0f), std::fill(ws.dout.begin(), ws.dout.end(), 0.0f);
      std::fill(ws.dq.begin(), ws.dq.end(), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = seq.q_start + i0 + r;
        simd.load(element_ptr(p.q, p.dtype, b * p.q_stride.b + row * p.q_stride.l + h * p.q_stride.h),
                  p.dtype, p.q_stride.d, &ws.q[r * Dl], D, 1.0f);
        simd.load(element_ptr(bp.dout, p.dtype,
                              b * bp.dout_stride.b + row * bp.dout_stride.l + h * bp.dout_stride.h),
                  p.dtype, bp.dout_stride.d, &ws.dout[r * Dl], D, 1.0f);
        simd.load(element_ptr(p.out, p.dtype, b * p.out_stride.b + row * p.out_stride.l + h * p.out_stride.h),
                  p.dtype, p.out_stride.d, ws.row.data(), D, 1.0f);
        float delta;  // rowsum(dO * O) on the SIMD dot product (a scalar chain of D dependent adds)
        simd.dots(&ws.dout[r * Dl], Dl, 1, ws.row.data(), D, &delta, 1);
        if (bp.dlse)  // a loss on the LSE: dS = P (dP - (D - dlse))
          delta -= static_cast<const float*>(
              bp.dlse)[b * bp.dlse_stride.b + h * bp.dlse_stride.h + row * bp.dlse_stride.l];
        ws.delta[r] = delta;
        ws.lse2[r] =
            static_cast<const float*>(p.lse)[b * p.lse_stride.b + h * p.lse_stride.h + row * p.lse_stride.l] *
            kLog2e;
      }
      if (bf16) {
        pack_col_pairs(simd, ws.q.data(), Dl, rows, D2, ws.qw.data(), D2);
        pack_col_pairs(simd, ws.dout.data(), Dl, rows, D2, ws.dow.data(), D2);
        pack_row_pairs(simd, ws.q.data(), Dl, rows, Dp, ws.qpw.data(), Dp);
        pack_row_pairs(simd, ws.dout.data(), Dl, rows, Dp, ws.dopw.data(), Dp);
      }
      const int64_t rows2 = (rows + 1) / 2;
      const bool qdo_finite = all_finite(ws.q.data(), rows * Dl) && all_finite(ws.dout.data(), rows * Dl);
      int64_t n_begin, n_end;
      key_block_range(mask, i0, i0 + rows, kBlockK, &n_begin, &n_end);
      // The next row block (this head's next, else the next head's first): its rows in slices.
      const bool next_head = i0 + kBlockQ >= Lq;
      const int64_t next_h = next_head ? h + 1 : h, next_i0 = next_head ? 0 : i0 + kBlockQ;
      const int64_t next_rows = next_h < (hk + 1) * p.group_size() ? std::min(kBlockQ, Lq - next_i0) : 0;
      const auto prefetch_next = [&](int64_t part, int64_t parts) {
        const int64_t r0 = next_rows * part / parts, n = next_rows * (part + 1) / parts - r0;
        const auto at = [&](const Strides4& st) {
          return [&, st](int64_t r) {
            return b * st.b + (seq.q_start + next_i0 + r0 + r) * st.l + next_h * st.h;
          };
        };
        prefetch_rows(p.q, p.dtype, D, p.q_stride.d, n, at(p.q_stride));
        prefetch_rows(bp.dout, p.dtype, D, bp.dout_stride.d, n, at(bp.dout_stride));
        prefetch_rows(p.out, p.dtype, D, p.out_stride.d, n, at(p.out_stride));
      };
      if (n_begin >= n_end) prefetch_next(0, 1);
      for (int64_t n = n_begin; n < n_end; ++n) {
        prefetch_next(n - n_begin, n_end - n_begin);
        const int64_t k0 = n * kBlockK, kn = std::min(kBlockK, Lk - k0), knp = round_up(kn, W);
        const bool whole =
            block_fully_visible(mask, i0, i0 + rows, k0, k0 + kn) || (qdo_finite && ws.k_finite[n]);
        // S = Q K^T, P from the LSE, dP = dO V^T, dS.
        if (bf16) {
          simd.gemm_bf16(rows, knp, D2, ws.qw.data(), D2, 1, ws.ktw.data() + n * D2 * Bl, Bl, ws.s.data(), Bl,
                         false);
          simd.gemm_bf16(rows, knp, D2, ws.dow.data(), D2, 1, ws.vtw.data() + n * D2 * Bl, Bl, ws.ds.data(),
                         Bl, false);
        } else {
          simd.gemm(rows, knp, D, ws.q.data(), Dl, 1, ws.kt.data() + n * KT, Bl, ws.s.data(), Bl, false);
          simd.gemm(rows, knp, D, ws.dout.data(), Dl, 1, ws.vt.data() + n * KT, Bl, ws.ds.data(), Bl, false);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t lo = std::max<int64_t>(0, mask.lo(i0 + r) - k0);
          const int64_t hi = std::min(kn, mask.hi(i0 + r) - k0);
          row_grads(simd, &ws.s[r * Bl], &ws.prob[r * Bl], &ws.ds[r * Bl], lo, hi, scale, cap, ws.lse2[r],
                    ws.delta[r]);
        }
        // dQ += dS K, dK += dS^T Q, dV += P^T dO: whole blocks when every row sees every key or
        // what the hidden zeros multiply is finite, else each row (each key) over the span it
        // sees, so a hidden NaN reaches no gradient.
        if (whole && bf16) {
          const int64_t kn2 = (kn + 1) / 2;
          pack_col_pairs(simd, ws.ds.data(), Bl, rows, kn2, ws.dsw.data(), Bc2);
          pack_row_pairs(simd, ws.ds.data(), Bl, rows, kBlockK, ws.dstw.data(), kBlockK);   // [Br/2][Bc]
          pack_row_pairs(simd, ws.prob.data(), Bl, rows, kBlockK, ws.ptw.data(), kBlockK);  // [Br/2][Bc]
          simd.gemm_bf16(rows, Dp, kn2, ws.dsw.data(), Bc2, 1, &ws.kw[k0 / 2 * Dp], Dp, ws.dq.data(), Dl,
                         true);
          simd.gemm_bf16(kn, Dp, rows2, ws.dstw.data(), 1, kBlockK, ws.qpw.data(), Dp, &ws.dk[k0 * Dl], Dl,
                         true);
          simd.gemm_bf16(kn, Dp, rows2, ws.ptw.data(), 1, kBlockK, ws.dopw.data(), Dp, &ws.dv[k0 * Dl], Dl,
                         true);
          continue;
        }
        if (whole) {
          simd.gemm(rows, Dp, kn, ws.ds.data(), Bl, 1, &ws.kf[k0 * Dl], Dl, ws.dq.data(), Dl, true);
          simd.gemm(kn, Dp, rows, ws.ds.data(), 1, Bl, ws.q.data(), Dl, &ws.dk[k0 * Dl], Dl, true);
          simd.gemm(kn, Dp, rows, ws.prob.data(), 1, Bl, ws.dout.data(), Dl, &ws.dv[k0 * Dl], Dl, true);
          continue;
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t lo = std::max<int64_t>(0, mask.lo(i0 + r) - k0),
                        hi = std::min(kn, mask.hi(i0 + r) - k0);
          if (lo < hi)
            simd.gemm(1, Dp, hi - lo, &ws.ds[r * Bl + lo], Bl, 1, &ws.kf[(k0 + lo) * Dl], Dl, &ws.dq[r * Dl],
                      Dl, true);
        }
        for (int64_t c = 0, r0 = 0, r1 = 0; c < kn; ++c) {
          // Rows of the block that see key k0 + c: a contiguous run [r0, r1) (mask.h).
          rows_seeing(mask, i0, rows, k0 + c, &r0, &r1);
          if (r0 >= r1) continue;
          simd.gemm(1, Dp, r1 - r0, &ws.ds[r0 * Bl + c], 1, Bl, &ws.q[r0 * Dl], Dl, &ws.dk[(k0 + c) * Dl], Dl,
                    true);
          simd.gemm(1, Dp, r1 - r0, &ws.prob[r0 * Bl + c], 1, Bl, &ws.dout[r0 * Dl], Dl,
                    &ws.dv[(k0 + c) * Dl], Dl, true);
        }
      }
      store_rows(bp.dq, bp.dq_stride, seq.q_start + i0, h, ws.dq.data(), rows, scale);
    }
  store_rows(bp.dk, bp.dk_stride, seq.k_start, hk, ws.dk.data(), Lk, scale);
  store_rows(bp.dv, bp.dv_stride, seq.k_start, hk, ws.dv.data(), Lk, 1.0f);
}

template <class Mask>
void run(const BackwardParams& bp) {
  const AttnParams& p = bp.fwd;
  const SimdKernels& simd = detail::simd();
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    Workspace ws;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < p.batch * p.heads_kv; ++item)
      run_kv_head<Mask>(bp, simd, item / p.heads_kv, item % p.heads_kv, ws);
  }
}

}  // namespace

void backward(const BackwardParams& b) {
  const AttnParams& p = b.fwd;
  if (p.batch == 0) return;
  if (!p.has_window())
    run<NoMask>(b);
  else if (p.window_left < 0 && p.window_right == 0)
    run<CausalMask>(b);
  else
    run<WindowMask>(b);
}

}  // namespace tileattn::detail::cpu
