#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_decode(const Buffers& b, bool causal) {
  time_one<Cfg<128, 128, 2, 2, true>>(b, causal);
  time_one<Cfg<128, 128, 2, 2, true, false, false>>(b, causal);
  time_one<Cfg<64, 128, 2, 3, true>>(b, causal);
  time_one<Cfg<64, 128, 2, 3, true, false, false>>(b, causal);
}
}  // namespace tileattn::sm90_tune
