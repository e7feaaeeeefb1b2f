#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void split_n64_s4(const Buffers& b) { time_one<Cfg<persistent(cfg(128, 64, 4, 2))>, true>(b, false); }
}  // namespace tileattn::sm90_tune
