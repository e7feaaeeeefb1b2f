// splits.cc: the split-KV count heuristics (see splits.h for the rules).
#include "dispatch/splits.h"

#include <algorithm>
#include <cmath>

namespace tileattn::detail {

int cuda_num_splits(int64_t tiles, int64_t sms, int64_t key_blocks, int max_splits) {
  if (tiles <= 0 || sms <= 0 || 10 * tiles >= 8 * sms) return 1;  // >= 80% of the SMs busy
  const int64_t limit = std::min<int64_t>({max_splits, sms, std::max<int64_t>(1, key_blocks / 2)});
  // Efficiency of s splits: the work over the SMs it occupies in whole waves.
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(tiles * s) / static_cast<double>(sms);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int64_t s = 1; s <= limit; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= limit; ++s)
    if (efficiency(s) >= 0.95 * best) return static_cast<int>(s);
  return 1;
}

int cpu_decode_splits(int64_t items, int64_t keys, int max_splits) {
  if (items <= 0 || items >= kCpuDecodeItems) return 1;
  const int64_t want = (kCpuDecodeItems + items - 1) / items;
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({want, keys / kCpuDecodeSplitKeys, max_splits})));
}

int cpu_num_splits(int64_t items, int64_t key_blocks, int max_splits) {
  if (items <= 0 || items >= kCpuSplitItems) return 1;
  const int64_t want = (kCpuSplitItems + items - 1) / items;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, key_blocks / 4, max_splits})));
}

}  // namespace tileattn::detail
