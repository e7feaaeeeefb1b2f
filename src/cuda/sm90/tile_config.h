// tile_config.h: the sm90 forward kernel's tiles, roles and shared-memory plan, with the reasons.
#pragma once

namespace tileattn::detail::sm90 {

// One CTA = 1 producer warpgroup (one thread issues every TMA load) + `consumers` warpgroups,
// each owning 64 query rows (wgmma's M), so block_m = 64 x consumers.
struct TileConfig {
  int head_dim;   // D the kernel is compiled for (64, 128, 256)
  int block_n;    // keys per mainloop step: the N of S = Q K^T and the K of O += P V
  int stages;     // depth of the K ring and of the V ring
  int consumers;  // consumer warpgroups (2 or 3)
  bool pingpong;  // consumers take turns issuing their GEMMs (one's softmax under the other's)
  // Persistent CTAs (one per SM) taking tiles from a counter in global memory, the next tile's
  // K0 loading under the current one's epilogue, and its Q too where O has its own staging.
  bool persistent = false;
  // GQA packing where it makes fewer tiles (pack_factor below); off only to time its effect.
  bool gqa_packing = true;
  // Serving kernels over a contiguous cache load V by cp.async from the producer warpgroup's
  // three idle warps, K staying on TMA (mainloop.cuh, load_v_tile): two engines streaming.
  bool v_by_warps = false;
  // Under a mask, a consumer skips the tile's trailing key blocks that none of its 64 rows sees
  // (the later rows of a causal tile do): it waits, takes its turns and releases them as
  // idle_tile does (mainloop.cuh). On at D = 64 (tile_config below); a tuning variant elsewhere.
  bool skip_masked_tail = false;
  // Each row's softmax max and sum as this many interleaved chains, the base moved without a
  // branch (softmax.cuh, BlockSoftmax). A tuning variant until an H200 has timed it.
  int softmax_chains = 1;
  // O / l written from the accumulators to global memory, two elements a 4-byte store, instead
  // of staged in shared memory for a TMA store (epilogue.cuh): persistent CTAs at D = 256, where
  // O has no room of its own, can then load the next tile's Q during the epilogue. A tuning
  // variant until an H200 has timed it.
  bool o_direct = false;
  // Persistent CTAs with O apart: the storing thread waits for its TMA store to have read O's
  // staging at the start of its next epilogue (and once after the CTA's last), not right after
  // issuing it, so its warp joins the next tile's GEMMs at once. A tuning variant.
  bool defer_store_wait = false;
  // Persistent CTAs with O apart: Q in two buffers, so the next tile's Q loads while this tile's
  // GEMMs still read the other, instead of after every consumer's last P V. A tuning variant.
  int q_buffers = 1;
  // Tiles taken longest first across (batch, head) pairs (tile_order.h, lpt_tile): every pair's
  // last m-block, then every pair's one before it, ..., over sections of pairs whose K and V fit
  // lpt_mib MiB of L2 (-1: all pairs in one section). 0: the library's order, one pair at a time.
  // A tuning variant: a list-scheduling model of the causal sweep put the library's order's tail
  // at 3-6% of a call at D = 128, L = 1k-8k (docs/kernels/sm90.md, "Persistent CTAs").
  int lpt_mib = 0;
  // Dense K and V loads with an L2 evict-last hint (every m-block of a pair reads them) and Q's
  // with evict-first (read once). A tuning variant; evict-first K and V slowed decoding by 3-5%.
  bool l2_hints = false;
  // Dense kernels under a mask: the tiles of a (batch, head) end at its last row, so the tile
  // cut short is the first, which sees the fewest keys, not the last, which sees the most. Its
  // leading consumers have no rows (the shift is a multiple of 64; scheduler.cuh, work_of) and
  // idle, as a consumer past the last row does. E.g. D = 64, L = 512 causal: 192-row tiles of
  // 1 + 3 + 4 key blocks instead of 2 + 3 + 4, one consumer idle in the 1-block tile.
  bool align_to_end = false;

  constexpr int block_m() const { return 64 * consumers; }
  constexpr int threads() const { return 128 * (consumers + 1); }
  // setmaxnreg: the 65536 registers of the SM, split so the consumers get the most. The
  // producer thread keeps the work, three tensor-map addresses and the ring state live. ptxas
  // (nvcc 13.0) reports the launch share (168 registers at 384 threads, 128 at 512) but
  // allocates the raised count in code the raise dominates (scripts/setmaxnreg_probe.sh).
  constexpr int producer_regs() const { return consumers == 2 ? 40 : 32; }
  constexpr int consumer_regs() const { return consumers == 2 ? 232 : 160; }
  // Split-KV merged by the kernel's last split (epilogue.cuh). Three consumers (D = 64) have no
  // registers to spare: with the merge inlined their serving kernels spill 130-180 bytes (ptxas
  // -v), so a combine kernel merges theirs.
  constexpr bool merges_splits() const { return consumers == 2; }
  // Tiles are stored as [D / 64][rows][64] elements: 128-byte rows, the TMA box and wgmma's
  // 128-byte swizzle atom. Every tile starts on a 1024-byte boundary.
  constexpr int q_bytes() const { return block_m() * head_dim * 2; }
  constexpr int kv_bytes() const { return block_n * head_dim * 2; }
  constexpr int barrier_bytes() const { return 1024; }
  // O is staged for its TMA store in Q's rows, or, for persistent CTAs where it fits, in its own
  // shared memory, so the next tile's Q can load during the epilogue.
  constexpr int bytes_but_o() const {
    return 1024 /* alignment */ + q_buffers * q_bytes() + 2 * stages * kv_bytes() + barrier_bytes();
  }
  constexpr bool o_apart() const {
    return persistent && !o_direct && bytes_but_o() + q_bytes() <= 227 * 1024;
  }
  constexpr int o_bytes() const { return o_apart() ? q_bytes() : 0; }
  // O staged in Q's rows: a persistent CTA's next Q waits for the epilogue's store to read them.
  constexpr bool o_in_q() const { return !o_apart() && !o_direct; }
  constexpr int smem_bytes() const { return bytes_but_o() + o_bytes(); }
};

// Measured on an H200 (tests/cuda_sm90/tune_sm90, bf16, B = 16384 / L, H = 2048 / D, TFLOP/s at
// L = 2048 / 8192, non-causal; 2026-11-29):
// - D = 64: three consumers, block_n 128 (433 / 512). Two consumers: 387 / 431 (the exp unit
//   bounds D = 64, and a third warpgroup gives it more rows to overlap); block_n 96 with three:
//   393 / 470; two consumers at 176 or 192: 373-382 / 437-446.
// - D = 128: two consumers, block_n 128 (574 / 664; causal 453 / 622). block_n 176: 568 / 671,
//   causal 435 / 622; 192 spills (454 / 519); three consumers at 96: 395 / 439.
// - D = 256: block_n 80 (690 / 796; causal 526 / 710) over 64 (668 / 756; 508 / 674). O alone is
//   128 registers a thread. Shared memory: Q 64 KiB + 2 x (K + V) 160 KiB = 226 KiB of 227.
// - stages = 2: a third stage measured slower at D = 64 and 128 (it costs shared memory and
//   the loads already have a step of lead: K is released right after S, V after P V).
// - Ping-pong (consumers taking turns on the tensor cores) is worth 0-4%, most on causal
//   problems of short rows; it is on everywhere.
// - FA4's exp2 by a cubic on the FMA pipe for every 2nd or 4th weight of a row (tried, then
//   removed): slower on every shape, e.g. D = 64, L = 4096: 351 / 399 against 472, D = 128:
//   557 against 639 (bench/results/tune_sm90_h200_2026-11-29_persistent_poly.txt). The FMA and
//   ALU pipes already carry the softmax's scaling, maxima, sums and conversions.
// - Persistent CTAs at D = 64 and 128 (bench/results/tune_sm90_h200_2026-11-29_persistent_packing.txt,
//   L = 512 / 1k / 4k / 16k against one CTA a tile): D = 64 341 / 395 / 489 / 530 against
//   289 / 357 / 474 / 509, causal 176 / 241 / 408 / 501 against 148 / 218 / 390 / 490; D = 128
//   475 / 569 / 660 / 680 against 407 / 517 / 657 / 694, causal 289 / 401 / 579 / 690 against
//   243 / 362 / 564 / 688. Short rows gain most: a CTA's start, its first loads and its epilogue
//   overlap the previous tile. Not at D = 256: O has no room of its own there (Q 64 KiB + the
//   rings 160 KiB), so the next Q waits for the epilogue, and causal problems lost 4% (non-causal
//   tied). Before the tile index was made warp-uniform (kernel.cuh, consume_all) and the counter
//   stopped being allocated per launch, persistent CTAs measured 5-30% slower everywhere
//   (bench/results/tune_sm90_h200_2026-11-29_persistent_poly.txt).
// - D = 64 skips a consumer's masked tail blocks (skip_masked_tail): causal 1.03-1.05x at L =
//   512-16k on an H100 (bench/results/tune_sm90_h100_2026-12-05_0bcd6ee.txt), outputs equal to
//   the kernel without it (max |diff| 0); non-causal kernels are the same code.
// - A second Q buffer with the O store's read waited for at the next epilogue (q_buffers = 2,
//   defer_store_wait) ran at 1.02-1.05x at L = 512, 1.00-1.02x at 1k and 0.995-1.02x from 2k on
//   at D = 64 and 128, two runs on an H100 (bench/results/tune_sm90_h100_2026-12-06_937cd47.txt,
//   outputs the same bits as the default's): the default at D = 64 and 128, so also for the
//   varlen, paged and split kernels built from tile_config (the GPU tests and sanitizers passed on
//   them at 4893de3; their speed with it is not yet timed). The long-decode config
//   (serving_tile_config at D = 128) keeps one Q buffer: its tiles are few, its time K and V's.
//   Storing O under the next tile's first S GEMM instead (tried at 937cd47, removed) ran at
//   0.87-1.02x: the store's ~2000 cycles then delayed that tile's first softmax and turns.
// - The dense kernels' lean epilogue (epilogue.cuh: O / l staged by stmatrix, 4 a thread at
//   D = 64 instead of 16 4-byte stores; the second barrier waited for by the storing warp only;
//   the LSE after it; a tuning option until then) ran at 1.00-1.02x at L = 512-4k at D = 64,
//   1.00-1.02x at D = 128 (0.997 at 4k) and 1.00-1.005x at D = 256 on an H100, the same bits
//   (bench/results/tune_sm90_h100_2026-12-06_88fc598.txt; its 16k full column, 1.04-1.06x for
//   most variants, has the default's reading low). Freeing Q after the last S GEMM and drawing
//   the next tile before a tile's loads lost in two runs (0.95-1.00x, 0.92-1.02x) and were
//   removed (docs/kernels/sm90_log.md).
// - With the lean epilogue and the end-aligned tiles (align_to_end) the forward sweep on an H100
//   ran D = 64 causal at 0.87 / 0.91x cuDNN at L = 512 / 1k (0.82 / 0.84x before, 221 / 305
//   TFLOP/s against 212 / 282; bench/results/gpu_forward_h100_2026-12-06_5cc3bd0.json).
constexpr TileConfig tile_config(int head_dim) {
  TileConfig c = head_dim > 128  ? TileConfig{256, 80, 2, 2, true, false}
                 : head_dim > 64 ? TileConfig{128, 128, 2, 2, true, true}
                                 : TileConfig{64, 128, 2, 3, true, true};
  c.skip_masked_tail = head_dim <= 64;
  if (c.persistent) c.q_buffers = 2, c.defer_store_wait = true;
  c.align_to_end = true;
  return c;
}

// GQA packing: the query heads of one KV head that share a tile, each tile row a (position,
// head) pair, position-major. Packing is chosen when it makes fewer tiles than one head a tile
// (short rows or partly filled last tiles: decoding, Lq = 200 in 128-row tiles), so K and V
// stream once for the whole group. The
// group must divide 64, so that each consumer's 64 rows hold whole positions (its O store is
// one box); 1 means no packing.
constexpr int pack_factor(long long seqlen_q, long long group, int block_m) {
  if (group <= 1 || 64 % group != 0) return 1;
  const long long one_head = (seqlen_q + block_m - 1) / block_m * group;
  const long long packed = (seqlen_q * group + block_m - 1) / block_m;
  return packed < one_head ? static_cast<int>(group) : 1;
}

// A paged KV cache: a key block loads as boxes of gcd(page_size, block_n) rows, so that each box
// lies in one page, and each box must hold whole 8-row swizzle atoms (1024 bytes) to land where
// one box of block_n rows would. 0: no such box (the sm80 kernel takes the cache).
constexpr int page_box(long long page_size, int block_n) {
  long long a = page_size, b = block_n;
  while (b != 0) {
    const long long t = a % b;
    a = b, b = t;
  }
  return page_size > 0 && a % 8 == 0 ? static_cast<int>(a) : 0;
}

// Paged caches whose pages those boxes do not fit (page_box 0), and paged caches with left
// padding (which would shift the boxes off the atoms), are gathered by cp.async (gather.cuh).
constexpr bool gathers_pages(long long page_size, bool left_padded, int block_n) {
  return left_padded || page_box(page_size, block_n) == 0;
}

// The serving kernel's config when it decodes a contiguous cache (launch.cuh: a tile's packed
// rows within one consumer, 32 key blocks or more a split): the dense one, but at D = 128, where
// the call streams K and V, V comes from the producer warpgroup's warps 1-3 by cp.async.
// tests/cuda_sm90/tune_sm90_split on an H200, GB/s of K and V, each call after an L2 flush
// (2026-12-04, commit 407accf): at 1 x 128k / 8 x 16k / 64 x 4k / 8 x 128k / 64 x 32k, TMA's V
// 3582 / 3649 / 3976 / 4133 / 4166, the V warps with 2 stages 3756 / 3797 / 4135 / 4227 / 4204,
// with 3 stages 3720 / 3745 / 4071 / 3749 / 3804; at 1 x 32k (16 blocks a split) TMA's V 2599,
// the V warps 2504.
constexpr TileConfig serving_tile_config(int head_dim) {
  TileConfig c = tile_config(head_dim);
  c.q_buffers = 1, c.defer_store_wait = false;
  if (head_dim > 64 && head_dim <= 128) c.v_by_warps = true;
  return c;
}

// The kernel is templated on a type carrying its config, so tuning builds can add others.
template <int kD>
struct DefaultConfig {
  static constexpr TileConfig kCfg = tile_config(kD);
};
template <int kD>
struct ServingConfig {
  static constexpr TileConfig kCfg = serving_tile_config(kD);
};

}  // namespace tileattn::detail::sm90
