#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void split_n64_s6(const Buffers& b) { time_one<Cfg<128, 64, 6, 2, true, true>, true>(b, false); }
}  // namespace tileattn::sm90_tune
