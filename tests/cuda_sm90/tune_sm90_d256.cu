// tune_sm90_d256.cu: the forward's variants at D = 256 (tune_sm90.cuh).
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {

void tune_d256(const Buffers& b, bool causal) {
  time_one<Cfg<kLib256>>(b, causal);
  // Persistent CTAs (O staged in Q's rows, so the next Q waits for the epilogue's store):
  // 1.01-1.04x up to 4k, 0.98-1.00x at 16k in two runs (4893de3, 88fc598).
  time_one<Cfg<persistent(kLib256)>>(b, causal);
  // Each consumer skipping the causal tile's blocks past its own rows (80-key blocks: the first
  // consumer's rows end a block early on some tiles).
  time_one<Cfg<skip(kLib256)>>(b, causal);
  // The softmax's max and sum as 4 chains a row, the base moved without a branch.
  time_one<Cfg<chains(kLib256, 4)>>(b, causal);
  // Persistent CTAs with O written from the accumulators (no staging in Q's rows, so the next
  // Q loads during the epilogue): 0.94-0.99x up to 4k (88fc598).
  time_one<Cfg<o_direct(persistent(cfg(256, 80, 2, 2)))>>(b, causal);
}

}  // namespace tileattn::sm90_tune
