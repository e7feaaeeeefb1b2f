// smem.cuh: the sm90 forward's shared memory plan (Q, the K and V rings, O's staging, barriers)
// and where a key block sits in the rings.
#pragma once

#include <cstdint>

#include "cuda/sm90/tile_config.h"

namespace tileattn::detail::sm90 {

// Carved from the 1024-aligned dynamic allocation: Q, the K ring, the V ring, O when it has its
// own (TileConfig::o_apart; none with o_direct), then the barriers.
template <class Cfg>
struct Smem {
  static constexpr TileConfig kCfg = Cfg::kCfg;
  uint8_t* base;
  __device__ uint8_t* q(int buffer = 0) const { return base + buffer * kCfg.q_bytes(); }
  __device__ uint8_t* k(int stage) const {
    return base + kCfg.q_buffers * kCfg.q_bytes() + stage * kCfg.kv_bytes();
  }
  __device__ uint8_t* v(int stage) const { return k(kCfg.stages + stage); }
  __device__ uint8_t* o() const { return kCfg.o_apart() ? k(2 * kCfg.stages) : q(); }
  __device__ uint64_t* barriers() const {
    return reinterpret_cast<uint64_t*>(k(2 * kCfg.stages) + kCfg.o_bytes());
  }
  // [0] Q full; per stage s: K full, V full (the loads landed), K empty, V empty (released).
  // A second Q buffer's full and empty barriers come after the tile slots.
  __device__ uint64_t* q_full(int buffer = 0) const {
    return buffer == 0 ? barriers() : barriers() + 9 + 4 * kCfg.stages;
  }
  __device__ uint64_t* k_full(int s) const { return barriers() + 1 + s; }
  __device__ uint64_t* v_full(int s) const { return barriers() + 1 + kCfg.stages + s; }
  __device__ uint64_t* k_empty(int s) const { return barriers() + 1 + 2 * kCfg.stages + s; }
  __device__ uint64_t* v_empty(int s) const { return barriers() + 1 + 3 * kCfg.stages + s; }
  // Persistent CTAs only: Q empty; the tile-index ring (2 slots) and its full / empty barriers.
  __device__ uint64_t* q_empty(int buffer = 0) const {
    return barriers() + (buffer == 0 ? 1 : 10) + 4 * kCfg.stages;
  }
  __device__ uint64_t* tile_full(int s) const { return barriers() + 2 + 4 * kCfg.stages + s; }
  __device__ uint64_t* tile_empty(int s) const { return barriers() + 4 + 4 * kCfg.stages + s; }
  // A ragged sequence's last V block, its rows past the keys zeroed (mainloop.cuh).
  __device__ uint64_t* v_tail() const { return barriers() + 6 + 4 * kCfg.stages; }
  __device__ int64_t* tile_slot(int s) const {
    return reinterpret_cast<int64_t*>(barriers() + 7 + 4 * kCfg.stages) + s;
  }
};

// The CTA's key block j (counted over all its tiles) sits in ring stage j % stages; the phase
// flips every lap.
template <class Cfg>
struct Slot {
  int stage;
  uint32_t phase;
  __device__ explicit Slot(int64_t j)
      : stage(static_cast<int>(j % Cfg::kCfg.stages)),
        phase(static_cast<uint32_t>((j / Cfg::kCfg.stages) & 1)) {}
};

// What the producer and the consumers count alike over a CTA's tiles: key blocks (the rings'
// position), tiles with rows (Q's buffer and phase), and ragged last V blocks (v_tail's phase).
struct Pipe {
  int64_t ring = 0;
  uint32_t tiles = 0, tails = 0;
  template <class Cfg>
  __device__ int q_buffer() const {
    return Cfg::kCfg.q_buffers == 1 ? 0 : static_cast<int>(tiles % Cfg::kCfg.q_buffers);
  }
  template <class Cfg>
  __device__ uint32_t q_phase() const {
    return (tiles / Cfg::kCfg.q_buffers) & 1;
  }
};

}  // namespace tileattn::detail::sm90
