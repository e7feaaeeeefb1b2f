// cpu_forward.cc: tiled attention with online softmax on the CPU.
//
// One work item = (batch, query head, query tile of Br rows). For each key block of Bc keys:
//   S = Q K^T (Q pre-scaled so S is in log2 units), mask, per row: advance the softmax state,
//   rescale the O row if the base moved, P = exp2(S - base), O += P V.
// Work items are independent and each runs the same instruction sequence whatever thread takes
// it, so results are bitwise identical for any thread count.
#include "cpu/cpu_forward.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/mask.h"
#include "common/online_softmax.h"
#include "cpu/tile_config.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {
namespace {

// Per-thread scratch: O(Br x D + Bc x D) floats, never O(Lq x Lk).
struct Workspace {
  std::vector<float> q;   // [Br][D]     pre-scaled query tile
  std::vector<float> kt;  // [D][Bcp]    key block, transposed
  std::vector<float> v;   // [Bc][Dp]    value block
  std::vector<float> s;   // [Br][Bcp]   logits, then weights
  std::vector<float> o;   // [Br][Dp]    unnormalized output
  std::vector<float> row; // [D]         one key row
  std::vector<SoftmaxRow> state;  // [Br]

  Workspace(int64_t br, int64_t bc, int64_t d, int64_t dp, int64_t bcp)
      : q(br * d), kt(d * bcp), v(bc * dp, 0.0f), s(br * bcp), o(br * dp), row(d), state(br) {}
};

const char* elem(const void* base, DType dtype, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}

template <class Mask>
void run_tile(const AttnParams& p, const Mask& mask, const SimdKernels& simd, int64_t b, int64_t h,
              int64_t q0, int64_t q1, Workspace& ws) {
  const TileConfig tile = tile_config(p.head_dim);
  const int64_t D = p.head_dim, Dp = round_up(D, simd.width), Bcp = round_up(tile.block_k, simd.width);
  const int64_t rows = q1 - q0, hk = h / p.group_size();
  const bool conditional = p.rescale == Rescale::kConditional;
  // With softcap the GEMM yields S / softcap and the log2 factor is applied after tanh.
  const float q_mul = p.softcap > 0 ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap_mul = p.softcap * kLog2e;

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = b * p.q_stride.b + (q0 + r) * p.q_stride.l + h * p.q_stride.h;
    simd.load(elem(p.q, p.dtype, off), p.dtype, p.q_stride.d, ws.q.data() + r * D, D, q_mul);
    ws.state[r] = SoftmaxRow{};
  }
  std::fill(ws.o.begin(), ws.o.begin() + rows * Dp, 0.0f);

  int64_t k_begin, k_end;
  tile_key_range(mask, q0, q1, &k_begin, &k_end);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += tile.block_k) {
    const int64_t kn = std::min(tile.block_k, k_end - k0);
    // K^T [D][Bcp] and V [kn][Dp], converted to fp32; columns past kn of K^T are zero.
    for (int64_t j = 0; j < kn; ++j) {
      const int64_t koff = b * p.k_stride.b + (k0 + j) * p.k_stride.l + hk * p.k_stride.h;
      simd.load(elem(p.k, p.dtype, koff), p.dtype, p.k_stride.d, ws.row.data(), D, 1.0f);
      for (int64_t d = 0; d < D; ++d) ws.kt[d * Bcp + j] = ws.row[d];
      const int64_t voff = b * p.v_stride.b + (k0 + j) * p.v_stride.l + hk * p.v_stride.h;
      simd.load(elem(p.v, p.dtype, voff), p.dtype, p.v_stride.d, ws.v.data() + j * Dp, D, 1.0f);
    }
    if (kn < Bcp)
      for (int64_t d = 0; d < D; ++d) std::fill_n(ws.kt.data() + d * Bcp + kn, Bcp - kn, 0.0f);

    simd.gemm(rows, Bcp, D, ws.q.data(), D, ws.kt.data(), Bcp, ws.s.data(), Bcp, false);

    const bool visible = block_fully_visible(mask, q0, q1, k0, k0 + kn);
    for (int64_t r = 0; r < rows; ++r) {
      float* s = ws.s.data() + r * Bcp;
      if (p.softcap > 0)
        for (int64_t j = 0; j < kn; ++j) s[j] = std::tanh(s[j]) * cap_mul;
      if (!visible) {
        const int64_t lo = mask.lo(q0 + r) - k0, hi = mask.hi(q0 + r) - k0;
        for (int64_t j = 0; j < kn; ++j)
          if (j < lo || j >= hi) s[j] = -INFINITY;
      }
      SoftmaxRow& st = ws.state[r];
      const float alpha = st.advance(simd.row_max(s, kn), conditional);
      if (alpha != 1.0f) simd.scale(ws.o.data() + r * Dp, Dp, alpha);
      st.add(simd.exp2_sum(s, kn, st.base()));
    }
    simd.gemm(rows, Dp, kn, ws.s.data(), Bcp, ws.v.data(), Dp, ws.o.data(), Dp, true);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const SoftmaxRow& st = ws.state[r];
    const int64_t off = b * p.out_stride.b + (q0 + r) * p.out_stride.l + h * p.out_stride.h;
    simd.store(ws.o.data() + r * Dp, st.inv_l(), const_cast<char*>(elem(p.out, p.out_dtype, off)),
               p.out_dtype, p.out_stride.d, D);
    if (p.lse) {
      const int64_t loff = b * p.lse_stride.b + h * p.lse_stride.h + (q0 + r) * p.lse_stride.l;
      static_cast<float*>(p.lse)[loff] = st.lse();
    }
  }
}

template <class Mask>
void run(const AttnParams& p, const Mask& mask) {
  const SimdKernels& simd = detail::simd();
  const TileConfig tile = tile_config(p.head_dim);
  const int64_t D = p.head_dim, Dp = round_up(D, simd.width), Bcp = round_up(tile.block_k, simd.width);
  const int64_t q_tiles = (p.seqlen_q + tile.block_q - 1) / tile.block_q;
  const int64_t items = p.batch * p.heads_q * q_tiles;
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();

#pragma omp parallel num_threads(threads)
  {
    Workspace ws(tile.block_q, tile.block_k, D, Dp, Bcp);
    // Later query tiles see more keys under a causal mask: hand them out first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qt = q_tiles - 1 - item % q_tiles;
      const int64_t bh = item / q_tiles;
      const int64_t q0 = qt * tile.block_q, q1 = std::min(p.seqlen_q, q0 + tile.block_q);
      run_tile(p, mask, simd, bh / p.heads_q, bh % p.heads_q, q0, q1, ws);
    }
  }
}

}  // namespace

void forward(const AttnParams& p) {
  if (p.batch == 0 || p.seqlen_q == 0) return;
  const int64_t offset = p.seqlen_k - p.seqlen_q;
  if (p.window_left < 0 && p.window_right < 0)
    run(p, NoMask{p.seqlen_k});
  else if (p.window_left < 0 && p.window_right == 0)
    run(p, CausalMask{p.seqlen_k, offset});
  else
    run(p, WindowMask{p.seqlen_k, offset, p.window_left, p.window_right});
}

}  // namespace tileattn::detail::cpu
