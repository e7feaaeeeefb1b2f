// memory_probe.cc: VmHWM reset and read-back through /proc/self.
#include "memory_probe.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace tileattn::cli {
namespace {

// A "Vm...:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atoll(line.c_str() + n + 1) * 1024;
  return -1;
}

bool reset_peak() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool wrote = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && wrote;
}

}  // namespace

int64_t peak_rss_growth(const std::function<void()>& fn) {
  const bool can_measure = reset_peak();
  const int64_t before = status_bytes("VmRSS");
  fn();
  const int64_t peak = status_bytes("VmHWM");
  if (!can_measure || before < 0 || peak < 0) return -1;
  return peak > before ? peak - before : 0;
}

}  // namespace tileattn::cli
