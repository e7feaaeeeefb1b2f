// tile_config.h: the sm80 kernel's tile sizes per head dim, and the reasons for each.
#pragma once

#include <cstdint>

namespace tileattn::detail::sm80 {

// One CTA computes block_m query rows of one (batch, head) against all the keys it sees, walking
// them block_n at a time. Each warp owns block_m / warps consecutive query rows (m_tiles() mma
// tiles of 16 rows) and keeps their O, S, m and l in registers.
struct TileConfig {
  int head_dim;    // the D the kernel is compiled for (problems with a smaller D are padded up)
  int block_m;     // query rows per CTA (Br)
  int block_n;     // keys per mainloop step (Bc)
  int warps;       // warps per CTA
  int stages;      // depth of the cp.async K/V ring (>= 2: block n+1 loads while n computes)
  int min_blocks;  // CTAs per SM that __launch_bounds__ budgets registers for

  constexpr int threads() const { return warps * 32; }
  constexpr int warp_rows() const { return block_m / warps; }
  constexpr int m_tiles() const { return warp_rows() / 16; }
  // Elements per shared-memory row: D rounded up to 64, 128 or 256, so the 128-byte XOR swizzle
  // (8 chunks of 16 bytes) always has whole 8-chunk groups. D = 96 leaves chunks 12..15 unused.
  constexpr int smem_row() const { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }
  constexpr int row_bytes() const { return smem_row() * 2; }
  constexpr int q_bytes() const { return block_m * row_bytes(); }
  constexpr int kv_tile_bytes() const { return block_n * row_bytes(); }
  constexpr int stage_bytes() const { return 2 * kv_tile_bytes(); }  // K and V of one block
  constexpr int smem_bytes() const { return q_bytes() + stages * stage_bytes(); }
};

// Why these numbers (H200 / A100 figures; mma.sync bf16 peaks at ~2578 FLOP/clk/SM on an H200,
// shared memory delivers 128 B/clk/SM):
// - Rows per warp = 32 (two m16 tiles) for D <= 128. Every K and V fragment a warp loads with
//   ldmatrix feeds mma for all its rows, so the FLOP per shared-memory byte equals the rows per
//   warp: 16 rows would need ~160 B/clk at the mma peak (more than shared memory gives), 32 rows
//   need ~80 B/clk plus the Q fragments, which are re-read from shared memory every step because
//   holding them would cost 8 * D / 16 registers more.
// - 4 warps, block_m = 128: 128 threads at <= 255 registers each and <= 113 KB of shared memory
//   let 2 CTAs share an SM, so one CTA's softmax overlaps the other's mma.
// - D = 64: block_n = 128. S takes 2 * 16 * 4 = 128 registers and O 64; the larger key block
//   halves the per-block overheads (barrier, max reduction, rescale check). Shared memory:
//   Q 16 KB + 2 stages x (K + V) 32 KB = 80 KB.
// - D = 96 and 128: block_n = 64. O takes 96 / 128 registers and S 64; block_n = 128 would push
//   past 255 registers. Shared memory: 32 KB + 2 x 32 KB = 96 KB (D = 96 is stored as 128).
// - D = 256: O alone is 128 registers per m16 tile, so a warp holds 16 rows and 8 warps make
//   block_m = 128 (the K/V tile is still shared by 128 rows). Shared memory: Q 64 KB +
//   2 x (K + V) 64 KB = 192 KB, one CTA of 8 warps per SM.
// - stages = 2: block n+1's K and V land while block n computes; the load was issued a whole
//   block earlier, which covers L2 latency. A third stage would cost a CTA per SM at D >= 96.
constexpr TileConfig tile_config(int head_dim) {
  switch (head_dim) {
    case 64:
      return TileConfig{64, 128, 128, 4, 2, 2};
    case 96:
      return TileConfig{96, 128, 64, 4, 2, 2};
    case 128:
      return TileConfig{128, 128, 64, 4, 2, 2};
    default:
      return TileConfig{256, 128, 64, 8, 2, 1};
  }
}

// The tiles the library compiles for kHeadDim, as a type (what the kernel template takes).
template <int kHeadDim>
struct DefaultTiles {
  static constexpr TileConfig kCfg = tile_config(kHeadDim);
};

// The head dims the kernel is compiled for; any other multiple of 8 up to 256 runs on the next
// larger one with its extra columns zero-filled on load and never stored.
inline constexpr int kHeadDims[] = {64, 96, 128, 256};

constexpr int padded_head_dim(int64_t head_dim) {
  for (int d : kHeadDims)
    if (head_dim <= d) return d;
  return 0;  // unsupported
}

}  // namespace tileattn::detail::sm80
