#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d128(const Buffers& b, bool causal) {
  time_one<Cfg<128, 128, 2, 2, true>>(b, causal);
  time_one<Cfg<128, 128, 2, 2, true, true>>(b, causal);
}
}  // namespace tileattn::sm90_tune
