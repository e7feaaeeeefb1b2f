#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d256(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(256, 80, 2, 2)>>(b, causal);
  time_one<Cfg<persistent(cfg(256, 80, 2, 2))>>(b, causal);
  // The default with each consumer skipping the causal tile's blocks past its own rows (80-key
  // blocks: the first consumer's rows end a block early on some tiles).
  time_one<Cfg<skip(cfg(256, 80, 2, 2))>>(b, causal);
  // The softmax's max and sum as 4 chains a row, the base moved without a branch.
  time_one<Cfg<chains(cfg(256, 80, 2, 2), 4)>>(b, causal);
  // Persistent CTAs with O written from the accumulators (no staging in Q's rows, so the next
  // Q loads during the epilogue): short rows, where a CTA a tile trails cuDNN.
  time_one<Cfg<o_direct(persistent(cfg(256, 80, 2, 2)))>>(b, causal);
  // O staged by stmatrix, the storing warp alone waiting for it (lean_epilogue).
  time_one<Cfg<lean(cfg(256, 80, 2, 2))>>(b, causal);
}
}  // namespace tileattn::sm90_tune
