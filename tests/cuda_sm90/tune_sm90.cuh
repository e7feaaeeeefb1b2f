// tune_sm90.cuh: times the sm90 forward under alternative configs (not the library's), to back
// the choices in src/cuda/sm90/tile_config.h, and to time the kernel with one stage of its
// pipeline turned off (ping-pong). Each variant's output is compared with the library's
// default kernel on the same inputs. Built with -DTILEATTN_SM90_TUNE=ON only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/params.h"
#include "cuda/sm90/launch.cuh"
#include "tileattn/tileattn.h"

namespace tileattn::sm90_tune {

using detail::AttnParams;
using detail::sm90::TileConfig;

struct Buffers {
  void *q, *k, *v, *o, *ref;
  float* lse;
  int64_t B, L, H;
};

template <int D, int N, int S, int C, bool PP, bool Persistent = false>
struct Cfg {
  static constexpr TileConfig kCfg{D, N, S, C, PP, Persistent};
};

// The largest |variant - default| over the output, read back on the host.
double max_diff_bf16(const void* a, const void* b, int64_t n);

template <class C>
void time_one(const Buffers& buf, bool causal) {
  constexpr TileConfig c = C::kCfg;
  const int64_t B = buf.B, L = buf.L, H = buf.H;
  AttnParams p;
  p.q = buf.q, p.k = buf.k, p.v = buf.v, p.out = buf.o, p.lse = buf.lse;
  p.dtype = p.out_dtype = DType::kBFloat16;
  p.batch = B, p.seqlen_q = p.seqlen_k = L, p.heads_q = p.heads_kv = H, p.head_dim = c.head_dim;
  const detail::Strides4 s{L * H * c.head_dim, H * c.head_dim, c.head_dim, 1};
  p.q_stride = p.k_stride = p.v_stride = p.out_stride = s;
  p.lse_stride = detail::Strides3{H * L, L, 1};
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.window_left = -1;
  p.window_right = causal ? 0 : -1;
  auto run = [&] { detail::sm90::launch_for<C>(p); };
  // The library's kernel on the same problem, for the comparison.
  const TensorRef qr = TensorRef::contiguous(buf.q, DType::kBFloat16, {B, L, H, c.head_dim}, Device::cuda(0));
  const TensorRef kr = TensorRef::contiguous(buf.k, DType::kBFloat16, {B, L, H, c.head_dim}, Device::cuda(0));
  const TensorRef vr = TensorRef::contiguous(buf.v, DType::kBFloat16, {B, L, H, c.head_dim}, Device::cuda(0));
  const TensorRef rr = TensorRef::contiguous(buf.ref, DType::kBFloat16, {B, L, H, c.head_dim}, Device::cuda(0));
  Options opt;
  opt.causal = causal;
  forward(qr, kr, vr, rr, nullptr, opt);
  cudaMemset(buf.o, 0xff, B * L * H * c.head_dim * 2);  // NaN: unwritten elements show
  run();
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("D=%3d N=%3d stages=%d consumers=%d pingpong=%d causal=%d: FAILED (%s)\n", c.head_dim, c.block_n,
                c.stages, c.consumers, c.pingpong, causal, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  const double diff = max_diff_bf16(buf.o, buf.ref, B * L * H * c.head_dim);
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> times;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(a);
    run();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double flops = 4.0 * B * H * L * L * c.head_dim * (causal ? 0.5 : 1.0);
  std::printf("D=%3d N=%3d stages=%d consumers=%d pingpong=%d persistent=%d smem=%6d causal=%d L=%5lld: "
              "%.3f ms %6.1f TFLOP/s  max|diff vs default| %.3g\n",
              c.head_dim, c.block_n, c.stages, c.consumers, c.pingpong, c.persistent, c.smem_bytes(),
              causal,
              static_cast<long long>(L), ms, flops / ms / 1e9, diff);
}

void tune_d64(const Buffers& buf, bool causal);
void tune_d128(const Buffers& buf, bool causal);
void tune_d256(const Buffers& buf, bool causal);

}  // namespace tileattn::sm90_tune
