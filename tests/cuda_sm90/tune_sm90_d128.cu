#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d128(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(128, 128, 2, 2)>>(b, causal);
  time_one<Cfg<persistent(cfg(128, 128, 2, 2))>>(b, causal);
  // 4 and 8 softmax chains ran at 0.96-1.02x, o_direct at 0.90-0.97x (H100, 3da3f80).
  // Without ping-pong, and with each consumer skipping the causal tile's blocks past its rows.
  time_one<Cfg<no_pingpong(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<skip(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  // Q in two buffers (226 KiB of shared memory), with the O store's wait deferred too (the
  // library's).
  time_one<Cfg<two_q(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<two_q(defer_store(persistent(cfg(128, 128, 2, 2))))>>(b, causal);
  // Each tile's epilogue under the next tile's first S GEMM: 0.92-1.02x (937cd47).
  // The next tile drawn before this one's loads and decoded in 32-bit arithmetic; with the
  // second Q buffer and the deferred store wait too.
  time_one<Cfg<handoff(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<handoff(two_q(defer_store(persistent(cfg(128, 128, 2, 2)))))>>(b, causal);
  // Tile orders, L2 hints and block_n 176 with persistent CTAs: tune_sm90_order.cu.
}
}  // namespace tileattn::sm90_tune
