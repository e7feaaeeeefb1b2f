// tune_sm90_d64.cu: the forward's variants at D = 64 (tune_sm90.cuh).
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {

void tune_d64(const Buffers& b, bool causal) {
  time_one<Cfg<kLib64>>(b, causal);
  // Tiles aligned to the start of the rows, the partial one last (under a mask: L = 512, 1k, 4k
  // and 16k cut the last 192-row tile short).
  time_one<Cfg<no_align(kLib64)>>(b, causal);
  // One CTA a tile, nothing else of the library's.
  time_one<Cfg<cfg(64, 128, 2, 3)>>(b, causal);
  // Without skipping a consumer's masked tail blocks: causal 0.92-0.98x (88fc598).
  time_one<Cfg<two_q(defer_store(persistent(cfg(64, 128, 2, 3))))>>(b, causal);
  // Two consumers (128-row tiles) and block_n 64 ran at 0.83-0.98x the default on an H100
  // (bench/results/tune_sm90_h100_2026-12-06_3da3f80.txt); 4 softmax chains at 0.97-1.04x.
  // Without ping-pong: short causal tiles end with all three consumers' epilogues together, and
  // a consumer's turn waits on the one before it even when it has no block.
  time_one<Cfg<no_pingpong(kLib64)>>(b, causal);
  // One Q buffer, the O store's read waited for at once.
  time_one<Cfg<skip(persistent(cfg(64, 128, 2, 3)))>>(b, causal);
  // Each tile's epilogue under the next tile's first S GEMM: 0.87-0.985x (937cd47). Q freed
  // after the last S GEMM, and the next tile drawn before a tile's loads: 0.94-1.01x in two runs
  // (4893de3, 88fc598), removed. Tile orders and L2 hints: tune_sm90_order.cu.
}

}  // namespace tileattn::sm90_tune
