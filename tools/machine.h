// machine.h: what the tool says about the machine it runs on (CPU, memory, threads, date, commit).
#pragma once

#include <cstdint>
#include <string>

#include "tileattn/tensor.h"

namespace tileattn::cli {

std::string cpu_model();          // /proc/cpuinfo's "model name", or "unknown CPU"
int64_t available_host_memory();  // /proc/meminfo's MemAvailable in bytes, 0 when unknown
int thread_count(int requested);  // requested when > 0, else OpenMP's default
std::string utc_date_time();      // "2026-11-29T20:15:03Z"
// The commit to record: `flag` when set, else $TILEATTN_COMMIT, else "" (unknown).
std::string git_commit(const std::string& flag);
// "cpu: Intel(R) Xeon(R) ..., avx512, 2 threads" or "cuda:0: NVIDIA H200 (sm_90, ...)"
std::string describe_device(const Device& device, int threads);

}  // namespace tileattn::cli
