// machine.cc: machine facts from /proc, OpenMP and the CUDA runtime.
#include "machine.h"

#include <omp.h>

#include <cstdlib>
#include <ctime>
#include <fstream>

#include "gpu_runtime.h"
#include "tileattn/version.h"

namespace tileattn::cli {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  return "unknown CPU";
}

int64_t available_host_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::atoll(line.c_str() + 13) * 1024;  // in kB
  return 0;
}

int thread_count(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

std::string utc_date_time() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string git_commit(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("TILEATTN_COMMIT");
  return env ? env : "";
}

std::string describe_device(const Device& device, int threads) {
  if (device.kind == DeviceKind::kCUDA)
    return device_name(device) + ": " + gpu::device_description(device.index);
  return "cpu: " + cpu_model() + ", SIMD " + cpu_isa() + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

}  // namespace tileattn::cli
