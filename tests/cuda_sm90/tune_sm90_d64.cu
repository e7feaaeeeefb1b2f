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
  // The softmax's max and sum as 4 chains a row, the base moved without a branch (the exp unit
  // and the softmax's latency bound D = 64 more than the tensor cores).
  time_one<Cfg<chains(persistent(cfg(64, 128, 2, 3)), 4)>>(b, causal);
}
}  // namespace tileattn::sm90_tune
