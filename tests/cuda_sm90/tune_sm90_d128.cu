// tune_sm90_d128.cu: the forward's variants at D = 128 (tune_sm90.cuh).
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {

void tune_d128(const Buffers& b, bool causal) {
  time_one<Cfg<kLib128>>(b, causal);
  // One CTA a tile, nothing else of the library's.
  time_one<Cfg<cfg(128, 128, 2, 2)>>(b, causal);
  // 4 and 8 softmax chains ran at 0.96-1.02x, o_direct at 0.90-0.97x (H100, 3da3f80).
  // Without ping-pong: causal 1.03-1.04x from 4k, 0.96x at 512 (4893de3, 88fc598); and with
  // each consumer skipping the causal tile's blocks past its rows.
  time_one<Cfg<no_pingpong(kLib128)>>(b, causal);
  time_one<Cfg<skip(kLib128)>>(b, causal);
  // One Q buffer, the O store's read waited for at once.
  time_one<Cfg<persistent(cfg(128, 128, 2, 2))>>(b, causal);
  // Each tile's epilogue under the next tile's first S GEMM: 0.92-1.02x (937cd47). Q freed
  // after the last S GEMM, and the next tile drawn before a tile's loads: 0.91-1.03x in two runs
  // (4893de3, 88fc598), removed. Tile orders, L2 hints and block_n 176: tune_sm90_order.cu.
}

}  // namespace tileattn::sm90_tune
