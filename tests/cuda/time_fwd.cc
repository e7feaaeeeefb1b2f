// time_fwd.cc: times forward() on the GPU for one shape (inputs filled on the device).
//   time_fwd B L H D causal [dtype=bf16|fp16] [iters=20]
// Prints: time per call and TFLOP/s = 4 B H L^2 D (halved for causal) / time.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fill.h"
#include "tileattn/tileattn.h"

using namespace tileattn;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: time_fwd B L H D causal [bf16|fp16] [iters]\n");
    return 2;
  }
  const int64_t B = std::atoll(argv[1]), L = std::atoll(argv[2]), H = std::atoll(argv[3]),
                D = std::atoll(argv[4]);
  const bool causal = std::atoi(argv[5]) != 0;
  const DType dtype = argc > 6 && std::string(argv[6]) == "fp16" ? DType::kFloat16 : DType::kBFloat16;
  const int iters = argc > 7 ? std::atoi(argv[7]) : 20;
  const int64_t n = B * L * H * D;
  void *q, *k, *v, *o;
  float* lse;
  if (cudaMalloc(&q, n * 2) || cudaMalloc(&k, n * 2) || cudaMalloc(&v, n * 2) || cudaMalloc(&o, n * 2) ||
      cudaMalloc(&lse, B * H * L * 4)) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  // bf16 bits of values in [-1, 1) read as fp16 are also small finite numbers.
  cuda_test::fill_hash_bf16(q, n, 1);
  cuda_test::fill_hash_bf16(k, n, 2);
  cuda_test::fill_hash_bf16(v, n, 3);
  auto ref = [&](void* p) { return TensorRef::contiguous(p, dtype, {B, L, H, D}, Device::cuda(0)); };
  const TensorRef lse_ref = TensorRef::contiguous(lse, DType::kFloat32, {B, H, L}, Device::cuda(0));
  Options opt;
  opt.causal = causal;
  for (int i = 0; i < 3; ++i) forward(ref(q), ref(k), ref(v), ref(o), &lse_ref, opt);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) forward(ref(q), ref(k), ref(v), ref(o), &lse_ref, opt);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  ms /= iters;
  const double flops = 4.0 * B * H * L * L * D * (causal ? 0.5 : 1.0);
  std::printf("tileattn %s B=%lld L=%lld H=%lld D=%lld causal=%d: %.3f ms, %.1f TFLOP/s\n", dtype_name(dtype),
              static_cast<long long>(B), static_cast<long long>(L), static_cast<long long>(H),
              static_cast<long long>(D), causal, ms, flops / ms / 1e9);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
