#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
// A paged cache (Buffers::page_size): the dense config's serving kernel (K and V by TMA boxes, a
// box a page), and V by the V warps' cp.async instead (2 and 3 stages; 3: the library's D = 128
// serving config).
void split_paged(const Buffers& b) { time_one<Cfg<128, 128, 2, 2, true, true>, true>(b, false); }
void split_paged_vwarps2(const Buffers& b) {
  time_one<Cfg<128, 128, 2, 2, true, true, true, true>, true>(b, false);
}
void split_paged_vwarps3(const Buffers& b) {
  time_one<Cfg<128, 128, 3, 2, true, true, true, true>, true>(b, false);
}
}  // namespace tileattn::sm90_tune
