// gpu_runtime_none.cc: the GPU calls in a build without CUDA: every call says so.
#include "gpu_runtime.h"
#include "tileattn/error.h"

namespace tileattn::cli::gpu {
namespace {
[[noreturn]] void no_cuda() { throw RuntimeError("this tileattn binary was built without CUDA"); }
}  // namespace

bool compiled() { return false; }
std::string device_description(int) { return "none (built without CUDA)"; }
std::size_t free_bytes(int) { return 0; }
void* allocate(std::size_t, int) { no_cuda(); }
void release(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t) { no_cuda(); }
void copy_to_host(void*, const void*, std::size_t) { no_cuda(); }
void synchronize(int) { no_cuda(); }
std::vector<double> time_series_ms(int, const std::function<void()>&, int) { no_cuda(); }

}  // namespace tileattn::cli::gpu
