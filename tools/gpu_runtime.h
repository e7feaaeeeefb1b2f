// gpu_runtime.h: the CUDA runtime calls the tool makes (memory, copies, timing), without CUDA headers.
// Implemented in gpu_runtime_cuda.cc when the build has CUDA, else by stubs that throw.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace tileattn::cli::gpu {

bool compiled();                            // whether this binary carries the CUDA runtime
std::string device_description(int index);  // "NVIDIA H200 (sm_90, 132 SMs, 140.4 GiB)"
std::size_t free_bytes(int index);          // free device memory now

void* allocate(std::size_t bytes, int index);  // throws tileattn::RuntimeError when it cannot
void release(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void synchronize(int index);

// Milliseconds each of `reps` calls of `fn` takes on the device, timed the way the GPU
// benchmarks time every implementation: before each call the L2 cache is flushed (a 256 MiB
// buffer is zeroed), events on the legacy default stream (the stream forward() and eager() use
// when Options::cuda_stream is null) bracket the call, and nothing waits between calls, so the
// launch queue stays full; one synchronization at the end.
std::vector<double> time_series_ms(int index, const std::function<void()>& fn, int reps);

}  // namespace tileattn::cli::gpu
