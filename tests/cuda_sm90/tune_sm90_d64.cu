#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d64(const Buffers& b, bool causal) {
  time_one<Cfg<64, 128, 2, 3, true>>(b, causal);
  time_one<Cfg<64, 128, 2, 3, true, true>>(b, causal);
}
}  // namespace tileattn::sm90_tune
