// tile_config.h: the CPU kernel's tile sizes, with the reasons.
#pragma once

#include <cstdint>

namespace tileattn::detail::cpu {

struct TileConfig {
  int64_t block_q;  // query rows per work item (Br)
  int64_t block_k;  // keys per inner step (Bc)
};

constexpr TileConfig tile_config(int64_t /*head_dim*/) {
  // Bc = 64: one S row is 64 floats = 4 AVX-512 vectors (8 AVX2, 16 SSE), the micro-kernel's
  //   full width, so S = Q K^T never runs a narrow edge tile.
  // Br = 64: K and V tiles are loaded (and converted to fp32) once per 64 query rows, so the
  //   conversion costs 1/128 of the FMAs; 64 x D fp32 tiles of Q, K^T, V and O take 128 KiB at
  //   D = 128 and 512 KiB at the CPU limit D = 512, inside a 1-2 MiB L2.
  // Work items (batch, head, query tile) number B*H*Lq/64: 1024 for the demo's shape, plenty
  //   for dynamic scheduling over a few cores.
  return TileConfig{64, 64};
}

}  // namespace tileattn::detail::cpu
