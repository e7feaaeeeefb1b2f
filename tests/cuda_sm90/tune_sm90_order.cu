// tune_sm90_order.cu: the forward's tile order, L2 hints and wider key blocks as tuning
// variants at D = 64 and 128 (a file of its own, so the tuning build spreads over more cores).
#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
namespace {
// Over kLib (the library's config): tiles longest first across the pairs (TileConfig::lpt_mib,
// tile_order.h) in sections whose K and V fit 24 or 32 MiB of L2 and in one section; K and V
// loaded evict-last in L2 and Q evict-first (l2_hints).
template <TileConfig kLib>
void time_orders(const Buffers& b, bool causal) {
  time_one<Cfg<lpt(kLib, 24)>>(b, causal);
  time_one<Cfg<lpt(kLib, 32)>>(b, causal);
  time_one<Cfg<lpt(kLib, -1)>>(b, causal);
  time_one<Cfg<l2_hints(kLib)>>(b, causal);
}
}  // namespace

void tune_d64_order(const Buffers& b, bool causal) { time_orders<kLib64>(b, causal); }
// At D = 128 also block_n 176 with persistent CTAs (O then staged in Q's rows), with and without
// ping-pong: 176 ran at 1.01x the library's 128 at 8k before persistent CTAs
// (bench/results/tune_sm90_h200_2026-11-29.txt).
void tune_d128_order(const Buffers& b, bool causal) {
  time_orders<kLib128>(b, causal);
  time_one<Cfg<persistent(cfg(128, 176, 2, 2))>>(b, causal);
  time_one<Cfg<no_pingpong(persistent(cfg(128, 176, 2, 2)))>>(b, causal);
}
}  // namespace tileattn::sm90_tune
