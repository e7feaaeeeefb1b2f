// cpu_decode.cc: decoding-sized problems on the CPU (cpu_decode.h).
#include "cpu/cpu_decode.h"

#include <algorithm>
#include <cmath>

#include "common/mask.h"

namespace tileattn::detail::cpu {
namespace {

// Whether each of the Lq rows sees every key of [k0, k0 + kn).
template <class Mask>
bool block_seen_whole(const Mask& mask, int64_t Lq, int64_t k0, int64_t kn) {
  for (int64_t i = 0; i < Lq; ++i)
    if (mask.lo(i) > k0 || mask.hi(i) < k0 + kn) return false;
  return true;
}

template <class Mask>
void run_item(const AttnParams& p, const SimdKernels& simd, int64_t b, int64_t hk0, int64_t hk1, int split,
              int splits, const Sink& sink, DecodeWorkspace& ws) {
  constexpr int64_t Bc = kDecodeBlock;
  const SeqInfo seq = seq_info(p.seqs, b);
  const int64_t Lq = seq.len_q, g = p.group_size(), D = p.head_dim, Dp = round_up(D, simd.width);
  if (Lq <= 0) return;
  const Mask mask = Mask::make(seq.len_q, seq.len_k, p.window_left, p.window_right);
  const bool conditional = p.rescale == Rescale::kConditional;
  // fp32 K and V with whole vectors per row are read where they lie (no copy).
  const bool unit = p.k_stride.d == 1 && p.v_stride.d == 1 && D % simd.width == 0 && p.page_table == nullptr;
  const bool in_place = unit && p.dtype == DType::kFloat32;
  // bf16 K and V (D up to 32 widths) are read where they lie too, widened in registers.
  const bool bf16_in_place = unit && p.dtype == DType::kBFloat16 && D <= 32 * simd.width;
  // Blocks every row sees whole stream K and V in address order (dots_heads / axpy_heads).
  const bool streams = in_place || bf16_in_place;
  const float q_mul = p.softcap > 0 ? p.scale / p.softcap : p.scale * kLog2e, cap_mul = p.softcap * kLog2e;
  // Row r = ((hk - hk0) * g + j) * Lq + i: query head hk * g + j, position i.
  const int64_t rows = (hk1 - hk0) * g * Lq;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = hk0 * g + r / Lq, i = r % Lq;
    const int64_t off = b * p.q_stride.b + (seq.q_start + i) * p.q_stride.l + h * p.q_stride.h;
    simd.load(element_ptr(p.q, p.dtype, off), p.dtype, p.q_stride.d, ws.q.data() + r * D, D, q_mul);
    std::fill_n(ws.o.begin() + r * Dp, Dp, 0.0f);
    ws.state[r] = SoftmaxRow{};
  }
  int64_t n_begin, n_end, s_begin, s_end, k_begin, k_end;
  key_block_range(mask, 0, Lq, Bc, &n_begin, &n_end);
  split_blocks(0, (seq.len_k + Bc - 1) / Bc, splits, split, &s_begin, &s_end);
  tile_key_range(mask, 0, Lq, &k_begin, &k_end);
  for (int64_t k0 = std::max(n_begin, s_begin) * Bc; k0 < std::min(n_end, s_end) * Bc && k0 < k_end;
       k0 += Bc) {
    const int64_t kn = std::min(Bc, k_end - k0);
    if (streams && block_seen_whole(mask, Lq, k0, kn)) {
      // K and V where they lie, in address order: position by position across the run's heads.
      const int64_t pos = seq.k_start + k0, heads = hk1 - hk0, per_head = g * Lq;
      const void* kb = element_ptr(p.k, p.dtype, kv_offset(p, p.k_stride, b, pos, hk0));
      const void* vb = element_ptr(p.v, p.dtype, kv_offset(p, p.v_stride, b, pos, hk0));
      simd.dots_heads(kb, bf16_in_place, p.k_stride.l, p.k_stride.h, kn, heads, per_head, ws.q.data(), D,
                      ws.s.data(), Bc);
      for (int64_t r = 0; r < rows; ++r) {
        float* s = ws.s.data() + r * Bc;
        if (p.softcap > 0)
          for (int64_t j = 0; j < kn; ++j) s[j] = std::tanh(s[j]) * cap_mul;
        SoftmaxRow& state = ws.state[r];
        const float alpha = state.advance(simd.row_max(s, kn), conditional);
        if (alpha != 1.0f) simd.scale(ws.o.data() + r * Dp, Dp, alpha);
        state.add(simd.exp2_sum(s, kn, state.base()));
      }
      simd.axpy_heads(vb, bf16_in_place, p.v_stride.l, p.v_stride.h, kn, heads, per_head, ws.s.data(), Bc,
                      ws.o.data(), Dp, D);
      continue;
    }
    for (int64_t j = 0; j < kn && !in_place && !bf16_in_place;
         ++j)  // position by position, across the run's KV heads
      for (int64_t hk = hk0; hk < hk1; ++hk) {
        const int64_t pos = seq.k_start + k0 + j, slot = (hk - hk0) * Bc + j;
        simd.load(element_ptr(p.k, p.dtype, kv_offset(p, p.k_stride, b, pos, hk)), p.dtype, p.k_stride.d,
                  ws.k.data() + slot * D, D, 1.0f);
        simd.load(element_ptr(p.v, p.dtype, kv_offset(p, p.v_stride, b, pos, hk)), p.dtype, p.v_stride.d,
                  ws.v.data() + slot * Dp, D, 1.0f);
      }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t hk = hk0 + r / (g * Lq), i = r % Lq;
      const float* k_rows = ws.k.data() + (hk - hk0) * Bc * D;
      const float* v_rows = ws.v.data() + (hk - hk0) * Bc * Dp;
      int64_t k_ld = D, v_ld = Dp;
      if (in_place) {
        k_rows = static_cast<const float*>(p.k) + kv_offset(p, p.k_stride, b, seq.k_start + k0, hk);
        v_rows = static_cast<const float*>(p.v) + kv_offset(p, p.v_stride, b, seq.k_start + k0, hk);
        k_ld = p.k_stride.l, v_ld = p.v_stride.l;
      }
      float* s = ws.s.data();
      const auto* k16 = static_cast<const uint16_t*>(p.k) + kv_offset(p, p.k_stride, b, seq.k_start + k0, hk);
      const auto* v16 = static_cast<const uint16_t*>(p.v) + kv_offset(p, p.v_stride, b, seq.k_start + k0, hk);
      if (bf16_in_place)
        simd.dots_bf16(k16, p.k_stride.l, kn, ws.q.data() + r * D, D, s);
      else
        simd.dots(k_rows, k_ld, kn, ws.q.data() + r * D, D, s, 1);
      if (p.softcap > 0)
        for (int64_t j = 0; j < kn; ++j) s[j] = std::tanh(s[j]) * cap_mul;
      const int64_t lo = std::max<int64_t>(0, mask.lo(i) - k0), hi = std::min<int64_t>(kn, mask.hi(i) - k0);
      for (int64_t j = 0; j < kn; ++j)
        if (j < lo || j >= hi) s[j] = -INFINITY;
      SoftmaxRow& state = ws.state[r];
      float* o_row = ws.o.data() + r * Dp;
      const float alpha = state.advance(simd.row_max(s, kn), conditional);
      if (alpha != 1.0f) simd.scale(o_row, Dp, alpha);
      state.add(simd.exp2_sum(s, kn, state.base()));
      // Only the keys the row sees: a hidden key's 0 weight times a NaN in V must not reach it.
      if (lo < hi && bf16_in_place)
        simd.gemv_bf16(hi - lo, s + lo, v16 + lo * p.v_stride.l, p.v_stride.l, o_row, D);
      else if (lo < hi)
        simd.gemm(1, Dp, hi - lo, s + lo, Bc, 1, v_rows + lo * v_ld, v_ld, o_row, Dp, true);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    store_row(p, simd, sink, b, hk0 * g + r / Lq, seq.q_start + r % Lq, ws.state[r], ws.o.data() + r * Dp);
}

}  // namespace

void decode_item(const AttnParams& p, const SimdKernels& simd, int64_t b, int64_t hk0, int64_t hk1, int split,
                 int splits, const Sink& sink, DecodeWorkspace& ws) {
  if (!p.has_window())
    run_item<NoMask>(p, simd, b, hk0, hk1, split, splits, sink, ws);
  else if (p.window_left < 0 && p.window_right == 0)
    run_item<CausalMask>(p, simd, b, hk0, hk1, split, splits, sink, ws);
  else
    run_item<WindowMask>(p, simd, b, hk0, hk1, split, splits, sink, ws);
}

}  // namespace tileattn::detail::cpu
