// gpu_runtime_cuda.cc: the tool's CUDA runtime calls; every return code is checked.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "gpu_runtime.h"
#include "tileattn/error.h"

namespace tileattn::cli::gpu {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw RuntimeError(std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                       cudaGetErrorString(status) + ")");
}

// Destroys an event when the timing scope ends, also when fn throws.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { check(cudaEventCreate(&event), "cudaEventCreate"); }
  ~Event() {
    if (event) cudaEventDestroy(event);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept : event(other.event) { other.event = nullptr; }
};

}  // namespace

bool compiled() { return true; }

std::string device_description(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, " (sm_%d%d, %d SMs, %.1f GiB)", prop.major, prop.minor,
                prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  return std::string(prop.name) + numbers;
}

std::size_t free_bytes(int index) {
  check(cudaSetDevice(index), "cudaSetDevice");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

void* allocate(std::size_t bytes, int index) {
  check(cudaSetDevice(index), "cudaSetDevice");
  void* ptr = nullptr;
  check(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return ptr;
}

void release(void* ptr) noexcept { cudaFree(ptr); }

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void synchronize(int index) {
  check(cudaSetDevice(index), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::vector<double> time_series_ms(int index, const std::function<void()>& fn, int reps) {
  check(cudaSetDevice(index), "cudaSetDevice");
  // Four times the 60 MB L2 of an H200 (50 MB on an H100): no input stays cached between calls.
  constexpr std::size_t kFlushBytes = std::size_t{256} << 20;
  struct Flush {
    void* ptr = nullptr;
    ~Flush() { cudaFree(ptr); }
  } flush;
  check(cudaMalloc(&flush.ptr, kFlushBytes), "cudaMalloc (L2 flush buffer)");
  std::vector<Event> start(reps), stop(reps);
  for (int i = 0; i < reps; ++i) {
    check(cudaMemsetAsync(flush.ptr, 0, kFlushBytes, nullptr), "cudaMemsetAsync (L2 flush)");
    check(cudaEventRecord(start[i].event, nullptr), "cudaEventRecord");
    fn();
    check(cudaGetLastError(), "kernel launch");
    check(cudaEventRecord(stop[i].event, nullptr), "cudaEventRecord");
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0.0f;
    check(cudaEventElapsedTime(&t, start[i].event, stop[i].event), "cudaEventElapsedTime");
    ms[i] = t;
  }
  return ms;
}

}  // namespace tileattn::cli::gpu
