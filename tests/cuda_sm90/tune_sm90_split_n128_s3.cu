#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void split_n128_s3(const Buffers& b) { time_one<Cfg<persistent(cfg(128, 128, 3, 2))>, true>(b, false); }
}  // namespace tileattn::sm90_tune
