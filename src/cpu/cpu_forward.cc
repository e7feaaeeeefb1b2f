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
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/aligned.h"
#include "common/mask.h"
#include "common/online_softmax.h"
#include "common/partial.h"
#include "cpu/combine.h"
#include "cpu/cpu_decode.h"
#include "cpu/kv_pairs.h"
#include "cpu/prefetch.h"
#include "cpu/sink.h"
#include "cpu/tile_config.h"
#include "dispatch/splits.h"
#include "simd/simd.h"

namespace tileattn::detail::cpu {
namespace {

// Per-thread scratch: O(Br x D + Bc x D) floats, never O(Lq x Lk).
// The logits are kept transposed, S^T [keys][queries]: then S^T = K Q^T reads K as it is stored
// (only Q, once per work item, is transposed), and the softmax's per-query max and sum run
// down columns, one SIMD lane per query.
// Q^T's columns by panels of 64 (a multiple of every ISA's micro-kernel width): one panel, the
// S^T GEMM's B operand for all of its rows, then lies in 8 pages instead of D rows' worth.
constexpr int64_t kQtPanel = 64;
struct Workspace {
  AlignedVector<float> qt;   // [ceil(Brp / 64)][D][64]  pre-scaled query tile, transposed, by panels
  AlignedVector<float> k;    // [Bc][D]     key block
  AlignedVector<float> v;    // [Bc][Dl]    value block (columns past D stay 0)
  AlignedVector<float> st;   // [Bc][Brp]   logits, then weights, transposed
  AlignedVector<float> o;    // [Br][Dl]    unnormalized output
  AlignedVector<float> row;  // [D]         one query row
  AlignedVector<float> max, base, sum;  // [Brp] per query
  std::vector<SoftmaxRow> state;        // [Br]
  // bf16 on the bf16 GEMM (simd gemm_bf16): words of two bf16, the first in the low half.
  AlignedVector<uint32_t> qw;     // [D / 2][Brp]       the query tile's pairs along d, transposed
  AlignedVector<uint32_t> kw;     // [Bc][D / 2]        the key block's pairs along d
  AlignedVector<uint32_t> vw;     // [Bc / 2][Dp]       the value block's pairs of rows
  AlignedVector<uint32_t> pw;     // [Bc / 2][Brp]      the weights' pairs along keys, transposed
  AlignedVector<uint16_t> row16;  // [2][D]         strided V rows gathered

  Workspace(int64_t br, int64_t brp, int64_t bc, int64_t d, int64_t dp, int64_t dl)
      : qt(d * round_up(brp, kQtPanel)),
        k(bc * d),
        v(bc * dl, 0.0f),
        st(bc * brp),
        o(br * dl),
        row(d),
        max(brp),
        base(brp),
        sum(brp),
        state(br),
        qw(d / 2 * brp),
        kw(bc * (d / 2)),
        vw((bc + 1) / 2 * dp),
        pw((bc + 1) / 2 * brp),
        row16(2 * d) {}
};

// -inf where row q0 + r does not see key k0 + j, in S^T [kn][ld]: for each key the rows that do
// not see it are a prefix and a suffix (rows_seeing, mask.h), two fills along S^T's contiguous
// row (a loop over the rows of each key had stored one float a cache line).
template <class Mask>
void mask_block(const Mask& mask, int64_t q0, int64_t rows, int64_t k0, int64_t kn, float* st, int64_t ld) {
  int64_t first = 0, past = 0;
  for (int64_t j = 0; j < kn; ++j) {
    rows_seeing(mask, q0, rows, k0 + j, &first, &past);
    float* s = st + j * ld;
    std::fill(s, s + first, -INFINITY);
    std::fill(s + std::max(first, past), s + rows, -INFINITY);
  }
}

// Rows [q0, q1) of sequence `seq` (batch b), head h, against this split's key blocks.
template <class Mask>
void run_tile(const AttnParams& p, const Mask& mask, const SimdKernels& simd, const TileConfig& tile,
              int64_t b, int64_t h, int64_t q0, int64_t q1, const SeqInfo& seq, int split, int splits,
              const Sink& sink, const PackedKv& packed, Workspace& ws) {
  const int64_t rows = q1 - q0, hk = h / p.group_size();
  // Columns of Q^T and S^T: this tile's rows rounded up to whole vectors (a short last tile
  // or a single decode row does not pay for a full Br), Brn; their rows Brp apart and O and V's
  // Dl, an odd number of cache lines (line_pitch: rows 2 or 4 KiB apart shared the L1's sets, and
  // the bf16 forward at 512-row tiles ran 1.06x, causal 1.13x, with the rows padded).
  const int64_t D = p.head_dim, Dp = round_up(D, simd.width), Dl = line_pitch(Dp),
                Brn = round_up(rows, simd.width), Brp = line_pitch(Brn);
  const bool conditional = p.rescale == Rescale::kConditional;
  const bool k_in_place = p.dtype == DType::kFloat32 && p.k_stride.d == 1 && p.page_table == nullptr;
  // With softcap the GEMM yields S / softcap and the log2 factor is applied after tanh.
  const float q_mul = p.softcap > 0 ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap_mul = p.softcap * kLog2e;
  // bf16 on the bf16 GEMM where it runs on AMX tiles: S^T from Q and K as they are (bf16
  // products are exact in fp32) times q_mul after, O += P V with the weights rounded to bf16, as
  // GPU kernels do (eager rounds S and P alike). With AVX512-BF16's dot products alone the
  // packing costs more than the GEMMs save (docs/cpu.md).
  const bool pairs = bf16_pairs(p.dtype == DType::kBFloat16, simd.amx, D);
  const bool k_words = pairs && k_words_in_place(p);
  // On pairs without a softcap S^T stays unscaled: its column maxima are scaled instead (x -> x
  // q_mul is monotonic for q_mul > 0, so the rounded maximum is the same), and the weights' pass
  // multiplies each logit by q_mul as the scale pass would have (exp2_pairs_cols): one pass over
  // S^T fewer. Not for a scale <= 0 (legal): masked -inf times it is NaN or +inf, and a maximum
  // becomes a minimum.
  const bool fold = pairs && p.softcap == 0 && q_mul > 0;
  const int64_t D2 = D / 2;

  const auto q_offset = [&](int64_t r) {
    return b * p.q_stride.b + (seq.q_start + q0 + r) * p.q_stride.l + h * p.q_stride.h;
  };
  prefetch_rows(p.q, p.dtype, D, p.q_stride.d, rows, q_offset);
  if (pairs)
    std::fill_n(ws.qw.begin(), D2 * Brp, 0u);
  else
    std::fill_n(ws.qt.begin(), D * round_up(Brn, kQtPanel), 0.0f);  // the panels the GEMM reads
  for (int64_t r = 0; r < rows; ++r) {
    const char* q = element_ptr(p.q, p.dtype, q_offset(r));
    if (pairs)
      for (int64_t x = 0; x < D2; ++x)
        ws.qw[x * Brp + r] = bf16_at(q, 2 * x, p.q_stride.d) | uint32_t{bf16_at(q, 2 * x + 1, p.q_stride.d)}
                                                                   << 16;
    else
      simd.load(q, p.dtype, p.q_stride.d, ws.row.data(), D, q_mul);
    float* qt_r = ws.qt.data() + r / kQtPanel * D * kQtPanel + r % kQtPanel;
    for (int64_t d = 0; !pairs && d < D; ++d) qt_r[d * kQtPanel] = ws.row[d];
    ws.state[r] = SoftmaxRow{};
  }
  std::fill(ws.o.begin(), ws.o.begin() + rows * Dl, 0.0f);

  // Key blocks sit on a fixed grid of Bc, whatever the query tile: a row then sums its keys in
  // the same groups for any tile height (which follows the thread count), so results do not
  // depend on the number of threads. Splits cut the sequence's blocks (not the tile's) for the
  // same reason.
  int64_t n_begin, n_end, k_end, s_begin, s_end;
  key_block_range(mask, q0, q1, tile.block_k, &n_begin, &n_end);
  split_blocks(0, (seq.len_k + tile.block_k - 1) / tile.block_k, splits, split, &s_begin, &s_end);
  n_begin = std::max(n_begin, s_begin);
  n_end = std::min(n_end, s_end);
  {
    int64_t unused;
    tile_key_range(mask, q0, q1, &unused, &k_end);
  }
  for (int64_t k0 = n_begin * tile.block_k; k0 < std::min(n_end * tile.block_k, k_end); k0 += tile.block_k) {
    // On bf16 pairs the block is the grid's whole block, keys past the tile's last visible one
    // masked below: the GEMMs' chunks of k and the finite-V choice then follow the grid, not the
    // tile's rows (whose height follows the thread count).
    const int64_t kn = std::min(tile.block_k, (pairs ? seq.len_k : k_end) - k0);
    // Unpacked: the next block's K and V rows, on their way to L2 while this block computes:
    // K's after the S^T GEMM (which reads this block's K), V's before the P V GEMM.
    // Issued together at the block's top, the 2 x Bc rows' lines filled the fill buffers and
    // the core waited on its prefetches (fp32, D = 128, L = 2048: 1.02-1.04x split, also causal).
    const int64_t k_next = k0 + tile.block_k;
    const int64_t kn_next =
        packed.empty() ? std::min(tile.block_k, std::min(n_end * tile.block_k, k_end) - k_next) : 0;
    const auto next_pos = [&](const Strides4& st) {
      return [&, st](int64_t j) { return kv_offset(p, st, b, seq.k_start + k_next + j, hk); };
    };
    bool v_finite = true;
    const uint32_t* vw = ws.vw.data();
    if (pairs) {  // S^T [kn][Brp] = K [kn][D] Q^T [D][Brp] over bf16 pairs (scaled after: fold)
      const uint32_t* kw = ws.kw.data();
      int64_t kw_ld = D2;
      if (!packed.empty()) {
        const int64_t block = k0 / tile.block_k;
        kw = packed.k(b, hk, block), vw = packed.v(b, hk, block);
        v_finite = packed.v_finite(b, hk, block);
      } else {
        v_finite = pack_kv_pairs(p, simd, b, seq.k_start + k0, kn, hk, Dp, k_words ? nullptr : ws.kw.data(),
                                 ws.vw.data(), ws.row16.data());
        if (k_words) {
          kw = static_cast<const uint32_t*>(p.k) + kv_offset(p, p.k_stride, b, seq.k_start + k0, hk) / 2;
          kw_ld = p.k_stride.l / 2;
        }
      }
      simd.gemm_bf16(kn, Brn, D2, kw, kw_ld, 1, ws.qw.data(), Brp, ws.st.data(), Brp, false);
      if (!fold) simd.scale(ws.st.data(), kn * Brp, q_mul);
    }
    // K as the GEMM's A operand: read in place when it is fp32 with unit head_dim stride (A is
    // only broadcast from, so its row stride does not matter), else converted into ws.k.
    const float* k_rows = ws.k.data();
    int64_t k_ld = D;
    if (k_in_place) {
      k_rows = static_cast<const float*>(p.k) + kv_offset(p, p.k_stride, b, seq.k_start + k0, hk);
      k_ld = p.k_stride.l;
    }
    for (int64_t j = 0; j < kn && (!pairs || !v_finite); ++j) {  // V (and K) rows, converted to fp32
      if (!k_in_place && !pairs) {
        const int64_t koff = kv_offset(p, p.k_stride, b, seq.k_start + k0 + j, hk);
        simd.load(element_ptr(p.k, p.dtype, koff), p.dtype, p.k_stride.d, ws.k.data() + j * D, D, 1.0f);
      }
      const int64_t voff = kv_offset(p, p.v_stride, b, seq.k_start + k0 + j, hk);
      simd.load(element_ptr(p.v, p.dtype, voff), p.dtype, p.v_stride.d, ws.v.data() + j * Dl, D, 1.0f);
    }
    // S^T [kn][Brp] = K [kn][D] Q^T [D][Brp]
    for (int64_t c = 0; !pairs && c < Brn; c += kQtPanel)  // a panel of Q^T at a time (the GEMM's order)
      simd.gemm(kn, std::min(kQtPanel, Brn - c), D, k_rows, k_ld, 1, ws.qt.data() + c * D, kQtPanel,
                ws.st.data() + c, Brp, false);
    prefetch_rows(p.k, p.dtype, D, p.k_stride.d, kn_next, next_pos(p.k_stride));

    if (p.softcap > 0)
      for (int64_t j = 0; j < kn; ++j)
        for (int64_t r = 0; r < rows; ++r) ws.st[j * Brp + r] = std::tanh(ws.st[j * Brp + r]) * cap_mul;
    const bool visible = block_fully_visible(mask, q0, q1, k0, k0 + kn);
    if (!visible) mask_block(mask, q0, rows, k0, kn, ws.st.data(), Brp);

    simd.col_max(ws.st.data(), kn, Brp, Brn, ws.max.data());
    if (fold)
      for (int64_t r = 0; r < rows; ++r) ws.max[r] *= q_mul;
    // Whether any row's base moves (SoftmaxRow::advance returns 1 for all others): a loop the
    // compiler vectorizes, where the rows' advance one by one (fmaxf a library call) was 2% of
    // the fp32 forward; with conditional rescaling most blocks move no row.
    int moves = 0;
    for (int64_t r = 0; r < rows; ++r) {  // branch-free, so that it vectorizes
      const float m = ws.state[r].m, m_new = ws.max[r] > m ? ws.max[r] : m;  // col_max drops NaN
      moves |= !((m_new == m) | (conditional & (m_new - m <= kRescaleThreshold)));
    }
    for (int64_t r = 0; moves && r < rows; ++r) {
      const float alpha = ws.state[r].advance(ws.max[r], conditional);
      if (alpha != 1.0f) simd.scale(ws.o.data() + r * Dl, Dp, alpha);
    }
    for (int64_t r = 0; r < rows; ++r) ws.base[r] = ws.state[r].base();
    std::fill(ws.base.begin() + rows, ws.base.begin() + Brp, 0.0f);  // padding columns: unused
    // The weights: as the bf16 GEMM's pairs of keys when they go through it, else in place.
    if (pairs && v_finite) {
      simd.exp2_pairs_cols(ws.st.data(), kn, Brp, Brn, fold ? q_mul : 1.0f, ws.base.data(), ws.sum.data(),
                           ws.pw.data(), Brp);
    } else {
      if (fold) simd.scale(ws.st.data(), kn * Brp, q_mul);
      simd.exp2_cols(ws.st.data(), kn, Brp, Brn, ws.base.data(), ws.sum.data());
    }
    for (int64_t r = 0; r < rows; ++r) ws.state[r].add(ws.sum[r]);
    prefetch_rows(p.v, p.dtype, D, p.v_stride.d, kn_next, next_pos(p.v_stride));
    // O [rows][Dp] += P [rows][kn] V [kn][Dp] (rows Dl apart), P read from S^T (A(i, j) = st[j * Brp + i]).
    // In a partly masked block each row sums only the keys it sees: a hidden key has P = 0,
    // but 0 * V is NaN when V holds a NaN or an inf, which must not reach rows that cannot see
    // it. Per element the sums are the same FMA sequence either way. On bf16 pairs the whole block
    // goes through the GEMM while V is finite (a hidden key's 0 x V is 0), row by row on fp32
    // weights where it is not: the choice follows V alone, not the tile's rows (thread count).
    if (pairs && v_finite) {
      simd.gemm_bf16(rows, Dp, (kn + 1) / 2, ws.pw.data(), 1, Brp, vw, Dp, ws.o.data(), Dl, true);
    } else if (visible && !pairs) {
      simd.gemm(rows, Dp, kn, ws.st.data(), 1, Brp, ws.v.data(), Dl, ws.o.data(), Dl, true);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t lo = std::max<int64_t>(0, mask.lo(q0 + r) - k0);
        const int64_t hi = std::min<int64_t>(kn, mask.hi(q0 + r) - k0);
        if (lo < hi)
          simd.gemm(1, Dp, hi - lo, ws.st.data() + lo * Brp + r, 1, Brp, ws.v.data() + lo * Dl, Dl,
                    ws.o.data() + r * Dl, Dl, true);
      }
    }
  }

  for (int64_t r = 0; r < rows; ++r)
    store_row(p, simd, sink, b, h, seq.q_start + q0 + r, ws.state[r], ws.o.data() + r * Dl);
}

template <class Mask>
void run(const AttnParams& p) {
  const SimdKernels& simd = detail::simd();
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
  TileConfig tile = tile_config(p.head_dim, p.seqlen_q, p.batch * p.heads_q, threads);
  // bf16 on AMX tiles: blocks of 256 keys (8 chunks of k pairs in O += P V between C's tile
  // loads and stores) and, without a mask, of 512 query rows where there are items enough (each
  // V block is packed once for more rows; under a causal mask the larger diagonal blocks cost
  // more than that saves). The Xeon of docs/cpu.md, D = 128, L = 2048: with 128 keys 208-223
  // GFLOP/s against 183-198 at 64 and 191-193 at 256, then 221-224 with 512 rows against 193-208
  // at 256 and 198-204 at 1024 (79d7c21, eabd560); once the buffers were aligned and K read in
  // place (ca7e96e), 256 keys ran 1.06-1.15x 128 (L = 512-4096, D = 64 and 128, GQA 32 / 8).
  const bool pairs = bf16_pairs(p.dtype == DType::kBFloat16, simd.amx, p.head_dim);
  if (pairs) {
    tile.block_k = 256;
    if (std::is_same_v<Mask, NoMask> && tile.block_q == 256 &&
        p.batch * p.heads_q * ((p.seqlen_q + 511) / 512) >= 4 * threads)
      tile.block_q = 512;
  }
  const int64_t D = p.head_dim, Dp = round_up(D, simd.width),
                Brp = line_pitch(round_up(tile.block_q, simd.width));  // run_tile's for a whole tile
  const int64_t q_tiles = (p.seqlen_q + tile.block_q - 1) / tile.block_q;
  const int64_t tiles = p.batch * p.heads_q * q_tiles;
  // The split count must not follow the thread count (block_q does): items of 64 rows decide.
  const int64_t items64 = p.batch * p.heads_q * ((p.seqlen_q + 63) / 64);
  const int splits =
      p.num_splits > 0 ? p.num_splits
      : p.seqlen_q <= kFewRows
          ? cpu_decode_splits(p.batch * ((p.heads_kv + 31) / 32), p.seqlen_k, kMaxSplits)
          : cpu_num_splits(items64, (p.seqlen_k + tile.block_k - 1) / tile.block_k, kMaxSplits);

  // Split-KV: each split's fp32 partial state, [S, B', L', Hq, D] and [S, B', Hq, L'], then the
  // merge (O(rows x S x D) scratch, never O(Lq x Lk)).
  std::vector<float> o_part, lse_part;
  Sink sink;
  const int64_t PB = p.part_batch(), PL = p.part_len(), Hq = p.heads_q;
  if (splits > 1) {
    o_part.resize(static_cast<size_t>(splits * PB * PL * Hq * D));
    lse_part.resize(static_cast<size_t>(splits * PB * Hq * PL));
    sink = Sink{nullptr, nullptr, PL * Hq * D, Hq * D, D, Hq * PL, PL};  // partial.h's layout, one split
  }

  const auto split_sink = [&](int split) {
    Sink s = sink;
    if (splits > 1) {
      s.o_part = o_part.data() + split * PB * PL * Hq * D;
      s.lse_part = lse_part.data() + split * PB * Hq * PL;
    }
    return s;
  };

  if (p.seqlen_q <= kFewRows) {
    // Decoding: items of whole sequences over runs of KV heads (cpu_decode.h), enough runs per
    // batch entry and split to give every thread 4 items.
    int64_t runs =
        std::clamp<int64_t>((4 * threads + p.batch * splits - 1) / (p.batch * splits), 1, p.heads_kv);
    runs = std::max(runs, (p.heads_kv + 31) / 32);  // at most 32 KV heads an item (cpu_decode.h)
    const int64_t per_run = (p.heads_kv + runs - 1) / runs;
#pragma omp parallel num_threads(threads)
    {
      DecodeWorkspace ws(per_run, per_run * p.group_size() * kFewRows, D, Dp);
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < p.batch * runs * splits; ++item) {
        const int split = static_cast<int>(item % splits);
        const int64_t run_index = item / splits % runs, b = item / splits / runs;
        const int64_t hk0 = run_index * per_run, hk1 = std::min(p.heads_kv, hk0 + per_run);
        if (hk0 < hk1) decode_item(p, simd, b, hk0, hk1, split, splits, split_sink(split), ws);
      }
    }
    if (splits > 1) cpu::combine(partial_combine(p, o_part.data(), lse_part.data(), splits));
    return;
  }

  // K and V packed once for all items where they would pack each block more than once (query
  // tiles x query heads of a KV head's group), bf16 on AMX, as the GEMMs' words. Each sequence's
  // blocks its rows read (a window over a chunk of rows reads few of them). Not the fp32 paths:
  // a copy of K and V in fp32 bought fp32 1.03-1.09x (c6955b7) for as much memory as K and V.
  std::vector<int64_t> first(p.batch), end(p.batch);
  for (int64_t b = 0; b < p.batch; ++b) {
    const SeqInfo seq = seq_info(p.seqs, b);
    const Mask mask = Mask::make(seq.len_q, seq.len_k, p.window_left, p.window_right);
    first[b] = end[b] = 0;
    if (seq.len_q > 0) key_block_range(mask, 0, seq.len_q, tile.block_k, &first[b], &end[b]);
  }
  const PackedKv packed(p, simd, tile.block_k, Dp, pairs ? q_tiles * p.group_size() : 0, first, end, threads);
#pragma omp parallel num_threads(threads)
  {
    Workspace ws(tile.block_q, Brp, tile.block_k, D, Dp, line_pitch(Dp));
    // Later query tiles see more keys under a causal mask: hand them out first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < tiles * splits; ++item) {
      const int split = static_cast<int>(item % splits);
      const int64_t tile_index = item / splits;
      const int64_t qt = q_tiles - 1 - tile_index % q_tiles;
      const int64_t bh = tile_index / q_tiles, b = bh / p.heads_q;
      const SeqInfo seq = seq_info(p.seqs, b);
      const int64_t q0 = qt * tile.block_q, q1 = std::min(seq.len_q, q0 + tile.block_q);
      if (q0 >= q1) continue;  // past this sequence's rows
      const Mask mask = Mask::make(seq.len_q, seq.len_k, p.window_left, p.window_right);
      run_tile(p, mask, simd, tile, b, bh % p.heads_q, q0, q1, seq, split, splits, split_sink(split), packed,
               ws);
    }
  }
  if (splits > 1) cpu::combine(partial_combine(p, o_part.data(), lse_part.data(), splits));
}

}  // namespace

void forward(const AttnParams& p) {
  if (p.batch == 0 || p.seqlen_q == 0) return;
  if (!p.has_window())
    run<NoMask>(p);
  else if (p.window_left < 0 && p.window_right == 0)
    run<CausalMask>(p);
  else
    run<WindowMask>(p);
}

}  // namespace tileattn::detail::cpu
