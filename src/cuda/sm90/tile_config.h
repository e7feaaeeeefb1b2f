// tile_config.h: the sm90 forward kernel's tiles, roles and shared-memory plan, with the reasons.
#pragma once

namespace tileattn::detail::sm90 {

// One CTA = 1 producer warpgroup (one thread issues every TMA load) + `consumers` warpgroups,
// each owning 64 query rows (wgmma's M), so block_m = 64 x consumers.
struct TileConfig {
  int head_dim;   // D the kernel is compiled for (64, 128, 256)
  int block_n;    // keys per mainloop step: the N of S = Q K^T and the K of O += P V
  int stages;     // depth of the K ring and of the V ring
  int consumers;  // consumer warpgroups (2 or 3)
  bool pingpong;  // consumers take turns issuing their GEMMs (one's softmax under the other's)

  constexpr int block_m() const { return 64 * consumers; }
  constexpr int threads() const { return 128 * (consumers + 1); }
  // setmaxnreg: the 65536 registers of the SM, split so the consumers get the most. The
  // producer thread keeps the work, three tensor-map addresses and the ring state live.
  constexpr int producer_regs() const { return consumers == 2 ? 40 : 32; }
  constexpr int consumer_regs() const { return consumers == 2 ? 232 : 160; }
  // Tiles are stored as [D / 64][rows][64] elements: 128-byte rows, the TMA box and wgmma's
  // 128-byte swizzle atom. Every tile starts on a 1024-byte boundary.
  constexpr int q_bytes() const { return block_m() * head_dim * 2; }
  constexpr int kv_bytes() const { return block_n * head_dim * 2; }
  constexpr int barrier_bytes() const { return 1024; }
  constexpr int smem_bytes() const { return 1024 /* alignment */ + q_bytes() + 2 * stages * kv_bytes() + barrier_bytes(); }
};

// - block_n = 128 at D = 64 and 128: S is m64n128 (64 fp32 registers a thread), P as bf16 A
//   fragments 32, O 32 or 64; with S of the next block in flight beside them that fits the 232
//   registers a consumer gets. FA3 uses 176 at D = 128 (an instruction we do not have yet).
// - D = 256: O alone is 128 registers a thread, so block_n = 64 (FA3: 80).
// - stages = 2: block n + 1 loads while n computes; K is released as soon as S is computed, V
//   after P V, so each load has about one step of lead. Shared memory at D = 128: Q 32 KiB +
//   2 x (K + V) 64 KiB = 160 KiB; at D = 256: 64 + 128 = 192 KiB (of 227).
constexpr TileConfig tile_config(int head_dim) {
  if (head_dim <= 64) return TileConfig{64, 128, 2, 3, true};
  if (head_dim <= 128) return TileConfig{128, 128, 2, 2, true};
  return TileConfig{256, 64, 2, 2, true};
}

// The kernel is templated on a type carrying its config, so tuning builds can add others.
template <int kD>
struct DefaultConfig {
  static constexpr TileConfig kCfg = tile_config(kD);
};

}  // namespace tileattn::detail::sm90
