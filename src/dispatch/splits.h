// splits.h: how many split-KV splits a problem gets (pure functions, unit-tested).
#pragma once

#include <cstdint>

namespace tileattn::detail {

// CUDA: tiles = CTAs' worth of work without splitting (query tiles x heads x batch), sms = the
// GPU's SMs, key_blocks = key blocks of the longest tile. One split while the tiles fill most
// of the SMs; else the fewest splits whose last wave is within 5% as full as the best count
// makes it (decoding is bound by memory: an SM left idle costs its share of the bandwidth, one
// more split only a little merging), keeping >= 2 key blocks a split. At most max_splits.
int cuda_num_splits(int64_t tiles, int64_t sms, int64_t key_blocks, int max_splits);

// CPU: items = work items without splitting (query tiles x heads x batch), key_blocks = key
// blocks of 64 of the longest row. Decode-like problems (fewer items than kCpuSplitItems)
// split so that there are about that many items, each with >= 4 key blocks. Depends on the
// problem only, never on the thread count, so results are the same for any thread count.
inline constexpr int64_t kCpuSplitItems = 64;
int cpu_num_splits(int64_t items, int64_t key_blocks, int max_splits);

// CPU decoding (at most a few query rows): items = batch entries x runs of up to 32 KV heads,
// keys = the longest sequence's. The keys are split until there are about kCpuDecodeItems
// items, each with >= kCpuDecodeSplitKeys keys: an item then reads its K and V as one stream
// (every head of a run, position by position) instead of a run of fewer heads each (a stride
// between rows that the hardware prefetchers do not follow). Thread-count independent too.
inline constexpr int64_t kCpuDecodeItems = 16, kCpuDecodeSplitKeys = 512;
int cpu_decode_splits(int64_t items, int64_t keys, int max_splits);

}  // namespace tileattn::detail
