#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
// A paged cache (Buffers::page_size): the dense config's serving kernel, K and V by TMA boxes, a
// box a page; and the library's paged decode config, K by boxes and V by the V warps.
void split_paged(const Buffers& b) { time_one<Cfg<128, 128, 2, 2, true, true>, true>(b, false); }
void split_paged_vwarps(const Buffers& b) { time_one<detail::sm90::PagedServingConfig<128>, true>(b, false); }
}  // namespace tileattn::sm90_tune
