#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
// A paged cache (Buffers::page_size) on the dense config's serving kernel, the library's for
// paged caches, and with the boxes of the block 2 or 4 ahead prefetched into L2.
void split_paged(const Buffers& b) { time_one<Cfg<128, 128, 2, 2, true, true>, true>(b, false); }
void split_paged_prefetch2(const Buffers& b) {
  time_one<Cfg<128, 128, 2, 2, true, true, true, false, 2>, true>(b, false);
}
void split_paged_prefetch4(const Buffers& b) {
  time_one<Cfg<128, 128, 2, 2, true, true, true, false, 4>, true>(b, false);
}
}  // namespace tileattn::sm90_tune
