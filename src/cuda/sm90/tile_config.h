// tile_config.h: the sm90 forward kernel's tiles and shared-memory plan, with the reasons.
#pragma once

namespace tileattn::detail::sm90 {

// One CTA = 3 warpgroups: warpgroup 0 produces (one thread issues every TMA load), warpgroups 1
// and 2 consume, each owning 64 query rows (wgmma's M), so block_m = 128.
struct TileConfig {
  int head_dim;  // D the kernel is compiled for (64 or 128)
  int block_n;   // keys per mainloop step: the N of S = Q K^T and the K of O += P V
  int stages;    // depth of the K/V ring

  static constexpr int kBlockM = 128;
  static constexpr int kThreads = 384;
  static constexpr int kConsumers = 2;
  // Tiles are stored as [D / 64][rows][64] elements: 128-byte rows, the TMA box and wgmma's
  // 128-byte swizzle atom. Every tile starts on a 1024-byte boundary.
  constexpr int q_bytes() const { return kBlockM * head_dim * 2; }
  constexpr int kv_bytes() const { return block_n * head_dim * 2; }
  constexpr int smem_bytes() const { return 1024 /* alignment */ + q_bytes() + 2 * stages * kv_bytes() + 1024; }
};

// - block_n = 128: S is m64n128 (64 fp32 registers a thread) and O is m64nD (32 or 64), which
//   leaves room under the 240 registers the consumers get; FA3 uses 176 at D = 128 (a later
//   tuning step here).
// - stages = 2: block n + 1 loads while n computes. Shared memory at D = 128: Q 32 KiB +
//   2 x (K + V) 64 KiB = 160 KiB of 227.
constexpr TileConfig tile_config(int head_dim) {
  return head_dim <= 64 ? TileConfig{64, 128, 2} : TileConfig{128, 128, 2};
}

}  // namespace tileattn::detail::sm90
