#include "tune_sm90.cuh"
namespace tileattn::sm90_tune {
void tune_d128(const Buffers& b, bool causal) {
  time_one<Cfg<cfg(128, 128, 2, 2)>>(b, causal);
  time_one<Cfg<persistent(cfg(128, 128, 2, 2))>>(b, causal);
  // The softmax's max and sum as 4 and 8 chains a row, the base moved without a branch.
  time_one<Cfg<chains(persistent(cfg(128, 128, 2, 2)), 4)>>(b, causal);
  time_one<Cfg<chains(persistent(cfg(128, 128, 2, 2)), 8)>>(b, causal);
  // O written from the accumulators instead of staged for a TMA store.
  time_one<Cfg<o_direct(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  // Without ping-pong, and with each consumer skipping the causal tile's blocks past its rows.
  time_one<Cfg<no_pingpong(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<skip(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  // The O store's wait deferred; Q in two buffers (226 KiB of shared memory); both.
  time_one<Cfg<defer_store(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<two_q(persistent(cfg(128, 128, 2, 2)))>>(b, causal);
  time_one<Cfg<two_q(defer_store(persistent(cfg(128, 128, 2, 2))))>>(b, causal);
}
}  // namespace tileattn::sm90_tune
