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
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
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

double time_ms(int index, const std::function<void()>& fn) {
  check(cudaSetDevice(index), "cudaSetDevice");
  Event start, stop;
  check(cudaEventRecord(start.event, nullptr), "cudaEventRecord");
  fn();
  check(cudaGetLastError(), "kernel launch");
  check(cudaEventRecord(stop.event, nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(stop.event), "cudaEventSynchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start.event, stop.event), "cudaEventElapsedTime");
  return ms;
}

}  // namespace tileattn::cli::gpu
