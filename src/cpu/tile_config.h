// tile_config.h: the CPU kernel's tile sizes, with the reasons.
#pragma once

#include <cstdint>

namespace tileattn::detail::cpu {

struct TileConfig {
  int64_t block_q;  // query rows per work item (Br)
  int64_t block_k;  // keys per inner step (Bc)
};

// Whether the forward takes bf16 through the bf16 GEMM on AMX tiles (cpu_forward.cc "pairs"):
// tiles of its own (256 keys; 512 rows without a mask) and K and V packed once (kv_pairs.h).
constexpr bool bf16_pairs(bool bf16, bool amx, int64_t head_dim) { return bf16 && amx && head_dim % 2 == 0; }

// heads = batch * query heads; threads = workers that share the items.
constexpr TileConfig tile_config(int64_t head_dim, int64_t seqlen_q, int64_t heads, int64_t threads) {
  // Bc = 64: S^T = K Q^T has Bc rows, a multiple of the micro-kernel's; 128 measured slower
  //   (the S^T and P tiles leave L1).
  // Br = 256: each K and V block is read from memory (and converted to fp32) once per Br query
  //   rows. On a 2-core AVX-512 machine, D = 128, L = 2048: Br = 64 ran at 45% of the FMA peak,
  //   128 at 47%, 256 at 51%: the K/V reads, strided by H * D in [B, L, H, D], are the rest.
  //   Q^T, S^T and O tiles then take 256 x (2D + 64) floats: 320 KiB at D = 128, inside L2.
  // Br = 128 for D > 256 keeps those tiles under ~1.2 MiB; Br = 64 when the big tiles would
  //   leave threads idle (fewer than 4 work items per thread).
  int64_t block_q = head_dim > 256 ? 128 : 256;
  while (block_q > 64 && heads * ((seqlen_q + block_q - 1) / block_q) < 4 * threads) block_q /= 2;
  return TileConfig{block_q, 64};
}

}  // namespace tileattn::detail::cpu
