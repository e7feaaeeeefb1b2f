// io_model.h: estimated memory traffic and extra memory of eager and tiled attention (docs/io_model.md).
#pragma once

#include <cstdint>

#include "shape.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn::cli {

struct Traffic {
  int64_t read = 0;     // bytes
  int64_t written = 0;  // bytes
  int64_t total() const { return read + written; }
};

struct Tiles {
  int64_t block_q = 64;  // query rows per tile (Br)
  int64_t block_k = 64;  // keys per tile (Bc)
};

// The CPU kernel's tiles for this problem on `threads` threads: the kernel's own tile_config (Br
// shrinks from 256 towards 64 when big tiles would leave threads idle; Bc = 64).
Tiles cpu_tiles(const Shape& shape, int threads);
// Whether this CPU's forward takes `dtype` through the bf16 GEMM on AMX tiles, with tiles of its
// own and K and V packed once for all threads (docs/cpu.md), outside cpu_tiles and
// tiled_workspace_bytes.
bool cpu_bf16_pairs(DType dtype, int64_t head_dim);
// A GPU kernel's tiles as it sets them. sm80: Br = 128; Bc = 128 at D <= 64, else 64. sm90 (D 64,
// 128, 256): Br = 192, 128, 128; Bc = 128, 128, 80.
Tiles gpu_tiles(const Shape& shape, Kernel kernel = Kernel::kCudaSm80);

// Eager: read Q and K, write S, read S and write P, read P and V, write O and LSE. Every query
// head reads its kv head's K and V; the mask does not shrink S and P (they are materialized whole).
Traffic eager_traffic(const Shape& shape, DType dtype);

// Tiled: read Q once; per query tile of block_q rows, read K and V for every key block the tile
// visits (whole blocks of block_k keys: all of them, or up to the diagonal when causal); write O
// and LSE once. No reuse across tiles through caches is counted.
Traffic tiled_traffic(const Shape& shape, DType dtype, bool causal, Tiles tiles);

// The floor under tiled: K and V of each kv head read once (they stay in cache across the query
// tiles and query heads that share them), Q read once, O and LSE written once.
Traffic tiled_traffic_kv_once(const Shape& shape, DType dtype);

// Keys one query tile of rows [q0, q1) reads (a causal tile starts at key 0, so q0 does not matter) under the
// model (whole key blocks, clipped to Lk).
int64_t tiled_keys_for_tile(const Shape& shape, bool causal, int64_t q1, int64_t block_k);

// Eager's S and P: 2 * B * Hq * Lq * Lk elements of the working dtype.
int64_t eager_extra_bytes(const Shape& shape, DType dtype);

// The CPU kernel's fp32 scratch per thread, Br x D (Q) + D x Bc (K^T) + Bc x D (V) + Br x Bc (S)
// + Br x D (O), times the threads: what the tiled path needs beyond inputs and outputs.
int64_t tiled_workspace_bytes(int threads, Tiles tiles, int64_t head_dim);

}  // namespace tileattn::cli
