#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
// A paged cache (Buffers::page_size): the dense config's serving kernel, K and V by TMA boxes, a
// box a page (the library's paged decode).
void split_paged(const Buffers& b) { time_one<Cfg<persistent(cfg(128, 128, 2, 2))>, true>(b, false); }
}  // namespace tileattn::sm90_tune
