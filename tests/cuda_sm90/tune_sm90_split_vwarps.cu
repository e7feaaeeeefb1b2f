#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
// V by cp.async from the producer warpgroup's other warps (3 stages: the library's D = 128
// serving config).
void split_n128_s2_vwarps(const Buffers& b) {
  time_one<Cfg<v_warps(persistent(cfg(128, 128, 2, 2)))>, true>(b, false);
}
void split_n128_s3_vwarps(const Buffers& b) {
  time_one<Cfg<v_warps(persistent(cfg(128, 128, 3, 2)))>, true>(b, false);
}
}  // namespace tileattn::sm90_tune
namespace tileattn::sm90_tune {
// The same without the consumers' turns (in a decode one consumer issues GEMMs, the other idles).
void split_n128_s3_vwarps_nopp(const Buffers& b) {
  time_one<Cfg<v_warps(persistent(no_pingpong(cfg(128, 128, 3, 2))))>, true>(b, false);
}
}  // namespace tileattn::sm90_tune
