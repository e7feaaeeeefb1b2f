#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_decode(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(128, 128, 2, 2)>>(b, causal);
  time_one<Cfg<no_packing(cfg(128, 128, 2, 2))>>(b, causal);
  time_one<Cfg<cfg(64, 128, 2, 3)>>(b, causal);
  time_one<Cfg<no_packing(cfg(64, 128, 2, 3))>>(b, causal);
}
}  // namespace tileattn::sm90_tune
