// tune_sm80.cu: times the sm80 kernel under alternative tile configs (not the library's), to
// back the choices in src/cuda/sm80/tile_config.h with measurements. Built with
// -DTILEATTN_SM80_TUNE=ON only. Usage: tune_sm80 [L=4096]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda/sm80/launch.cuh"
#include "fill.h"

using namespace tileattn;
using namespace tileattn::detail;
using namespace tileattn::detail::sm80;

namespace {

template <int D, int BM, int BN, int W, int S, int MB>
struct Tiles {
  static constexpr TileConfig kCfg{D, BM, BN, W, S, MB};
};

template <class Cfg>
void time_one(void* q, void* k, void* v, void* o, float* lse, int64_t B, int64_t L, int64_t H, bool causal) {
  constexpr TileConfig c = Cfg::kCfg;
  AttnParams p;
  p.q = q, p.k = k, p.v = v, p.out = o, p.lse = lse;
  p.dtype = p.out_dtype = DType::kBFloat16;
  p.batch = B, p.seqlen_q = p.seqlen_k = L, p.heads_q = p.heads_kv = H, p.head_dim = c.head_dim;
  const Strides4 s{L * H * c.head_dim, H * c.head_dim, c.head_dim, 1};
  p.q_stride = p.k_stride = p.v_stride = p.out_stride = s;
  p.lse_stride = Strides3{H * L, L, 1};
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.window_right = causal ? 0 : -1;
  p.seqs.max_q = p.seqs.max_k = L;
  p.num_splits = 1;
  auto run = [&] {
    if (causal)
      launch<Cfg, __nv_bfloat16, WindowMask, false>(p);
    else
      launch<Cfg, __nv_bfloat16, NoMask, false>(p);
  };
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  const int iters = 20;
  for (int i = 0; i < iters; ++i) run();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  ms /= iters;
  const double flops = 4.0 * B * H * L * L * c.head_dim * (causal ? 0.5 : 1.0);
  std::printf("D=%3d Br=%3d Bc=%3d warps=%d stages=%d minB=%d smem=%6d causal=%d: %.3f ms %.1f TFLOP/s\n",
              c.head_dim, c.block_m, c.block_n, c.warps, c.stages, c.min_blocks, c.smem_bytes(), causal, ms,
              flops / ms / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t L = argc > 1 ? std::atoll(argv[1]) : 4096, B = 16384 / L, H = 16, Dmax = 256;
  const int64_t n = B * L * H * Dmax;
  void *q, *k, *v, *o;
  float* lse;
  cudaMalloc(&q, n * 2), cudaMalloc(&k, n * 2), cudaMalloc(&v, n * 2), cudaMalloc(&o, n * 2);
  cudaMalloc(&lse, B * H * L * 4);
  cuda_test::fill_hash_bf16(q, n, 1);
  cuda_test::fill_hash_bf16(k, n, 2);
  cuda_test::fill_hash_bf16(v, n, 3);
  for (bool causal : {false, true}) {
    time_one<Tiles<128, 128, 64, 4, 2, 2>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<128, 128, 64, 4, 3, 1>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<128, 128, 128, 8, 2, 1>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<128, 64, 64, 4, 2, 3>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<64, 128, 128, 4, 2, 2>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<64, 128, 64, 4, 2, 2>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<64, 128, 64, 4, 3, 3>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<256, 128, 64, 8, 2, 1>>(q, k, v, o, lse, B, L, H, causal);
    time_one<Tiles<256, 128, 32, 8, 3, 1>>(q, k, v, o, lse, B, L, H, causal);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("%s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
