// tile_order.h: which tile of the forward a tile index names (scheduler.cuh, work_of), host and
// device, tested on the CPU (tests/sm90_tiles_test.cc).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tileattn::detail::sm90 {

struct TileSlot {
  int64_t m_block, pair;  // pair: batch-major (batch, head or head group)
};

// The tuning order TileConfig::lpt_mib: longest first over sections of `section` pairs. Within a
// section every pair's last m-block (the one that sees the most keys under a causal mask) comes
// first, then every pair's one before it, and so on; the sections follow one another and the last
// may be short. The library's order is one pair at a time, longest first within it (work_of).
TILEATTN_HD TileSlot lpt_tile(int64_t tile, int64_t m_blocks, int64_t pairs, int64_t section) {
  const int64_t per = section * m_blocks, s = tile / per, in = tile - s * per, first = s * section;
  const int64_t n = pairs - first < section ? pairs - first : section;
  const int64_t step = in / n;
  return {m_blocks - 1 - step, first + (in - step * n)};
}

// Pairs a section under TileConfig::lpt_mib: as many whose K and V (kv_bytes each) fit mib MiB,
// at least one; mib < 0: every pair in one section. Under GQA without packing, pairs of one KV
// head share its K and V, so the sections come out smaller than the budget allows.
inline int64_t lpt_section(int mib, int64_t kv_bytes, int64_t pairs) {
  const int64_t all = pairs > 0 ? pairs : 1;
  if (mib < 0 || kv_bytes <= 0) return all;
  const int64_t fit = (int64_t{mib} << 20) / kv_bytes;
  return fit < 1 ? 1 : fit < all ? fit : all;
}

}  // namespace tileattn::detail::sm90
