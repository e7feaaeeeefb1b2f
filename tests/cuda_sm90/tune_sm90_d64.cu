#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d64(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(64, 128, 2, 3)>>(b, causal);
  // The library's default before it skipped a consumer's masked tail blocks.
  time_one<Cfg<persistent(cfg(64, 128, 2, 3))>>(b, causal);
  // Two consumers (128-row tiles): causal rows of 512 and 1k keys, where three (192-row tiles,
  // 64-row slices of them past the diagonal) trail cuDNN the most.
  time_one<Cfg<persistent(cfg(64, 128, 2, 2))>>(b, causal);
  // The library's default: each consumer skips the causal tile's blocks past its own rows.
  time_one<Cfg<skip(persistent(cfg(64, 128, 2, 3)))>>(b, causal);
  // Short causal rows at block_n 64: half the keys a diagonal block computes past a row's last,
  // against twice the steps (block_n 96 lost 8-10% non-causal, tile_config.h). With the skip
  // and without; and two consumers with the skip.
  time_one<Cfg<persistent(cfg(64, 64, 2, 3))>>(b, causal);
  time_one<Cfg<skip(persistent(cfg(64, 64, 2, 3)))>>(b, causal);
  time_one<Cfg<skip(persistent(cfg(64, 128, 2, 2)))>>(b, causal);
  // The default without ping-pong: short causal tiles end with all three consumers' epilogues
  // together, and a consumer's turn waits on the one before it even when it has no block to
  // compute (4 softmax chains, timed here before, ran at 0.97-1.04x: docs/kernels/sm90.md).
  time_one<Cfg<no_pingpong(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  // The storing thread's wait for its O store deferred to its next epilogue; the next tile's Q
  // in a second buffer; both.
  time_one<Cfg<defer_store(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  time_one<Cfg<two_q(skip(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  time_one<Cfg<two_q(defer_store(skip(persistent(cfg(64, 128, 2, 3)))))>>(b, causal);
}
}  // namespace tileattn::sm90_tune
