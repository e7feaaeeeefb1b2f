#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d64(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(64, 128, 2, 3)>>(b, causal);
  // The library's default before it skipped a consumer's masked tail blocks.
  time_one<Cfg<persistent(cfg(64, 128, 2, 3))>>(b, causal);
  // Each consumer skips the causal tile's blocks past its own rows (one Q buffer).
  time_one<Cfg<skip(persistent(cfg(64, 128, 2, 3)))>>(b, causal);
  // Two consumers (128-row tiles) and block_n 64 ran at 0.83-0.98x the default on an H100
  // (bench/results/tune_sm90_h100_2026-12-06_3da3f80.txt); 4 softmax chains at 0.97-1.04x.
  // The default without ping-pong: short causal tiles end with all three consumers' epilogues
  // together, and a consumer's turn waits on the one before it even when it has no block.
  time_one<Cfg<no_pingpong(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  // The next tile's Q in a second buffer; with the O store's wait deferred too (the library's).
  time_one<Cfg<two_q(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  time_one<Cfg<two_q(defer_store(skip(persistent(cfg(64, 128, 2, 3)))))>>(b, causal);
  // Each tile's epilogue under the next tile's first S GEMM: 0.87-0.985x (937cd47).
  // The next tile drawn before this one's loads and decoded in 32-bit arithmetic; with the
  // second Q buffer and the deferred store wait too.
  time_one<Cfg<handoff(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  time_one<Cfg<handoff(two_q(defer_store(skip(persistent(cfg(64, 128, 2, 3))))))>>(b, causal);
  // Tile orders and L2 hints: tune_sm90_order.cu.
}
}  // namespace tileattn::sm90_tune
