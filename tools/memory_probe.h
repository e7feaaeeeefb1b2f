// memory_probe.h: peak resident-memory growth of the process while a call runs (Linux).
#pragma once

#include <cstdint>
#include <functional>

namespace tileattn::cli {

// Resets the kernel's peak-RSS mark (write "5" to /proc/self/clear_refs), runs fn, and returns
// VmHWM after minus VmRSS before: the most memory the call added at any moment, at page grain,
// counting only pages it touched. -1 when the reset is not permitted here.
int64_t peak_rss_growth(const std::function<void()>& fn);

}  // namespace tileattn::cli
