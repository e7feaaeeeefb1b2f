// tune_sm90_probe: where a split-KV decode kernel's time goes, CTA by CTA. The serving kernel
// (D = 128, block_n 128, two stages, persistent) is built here with TILEATTN_SM90_PROBE marking
// four points of each CTA with the global timer: entry, its first K block landed (consumer 0),
// consumer 0 done with its tiles, the producer done. One launch after an L2 flush; the spread
// of those points over the CTAs separates launch skew, start-up, streaming and the tail.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/sm90/barrier.cuh"

namespace {
constexpr int kMaxCtas = 1024;
__device__ unsigned long long g_probe[kMaxCtas][4];

template <class S>
__device__ void probe_mark(const S& sm, int point) {
  const bool producer = point == 0 || point == 3;
  if (threadIdx.x != (producer ? 0 : 128) || blockIdx.x >= kMaxCtas) return;
  if (point == 1) tileattn::detail::sm90::mbarrier_wait<false>(sm.k_full(0), 0);
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_probe[blockIdx.x][point] = t;
}
}  // namespace

#define TILEATTN_SM90_PROBE(sm, point) probe_mark(sm, point)

#include "fill.h"
#include "tune_sm90.cuh"

namespace {
using namespace tileattn;
using C = sm90_tune::Cfg<128, 128, 2, 2, true, true>;

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

void probe(const sm90_tune::Buffers& buf, void* flush, size_t flush_bytes) {
  const detail::AttnParams p = sm90_tune::params_of(buf, 128, false);
  const int64_t B = buf.B, Lk = buf.Lk, D = 128;
  const auto [pack, splits] = detail::sm90::launch_shape<C>(p);
  const int64_t tiles = B * (32 / pack);
  const int64_t ctas = std::min<int64_t>(tiles * splits, 132);
  std::vector<double> span, skew, first, done_min, done_med, done_max, stream, prod_med, prod_max;
  for (int rep = 0; rep < 7; ++rep) {
    unsigned long long host[kMaxCtas][4] = {};
    cudaMemcpyToSymbol(g_probe, host, sizeof(host));
    cudaMemset(flush, rep, flush_bytes);
    detail::sm90::launch<C, __nv_bfloat16, detail::NoMask, true>(p, pack, splits);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
      return;
    }
    cudaMemcpyFromSymbol(host, g_probe, sizeof(host));
    unsigned long long t0 = ~0ull, t_end = 0;
    for (int64_t i = 0; i < ctas; ++i) t0 = std::min(t0, host[i][0]), t_end = std::max(t_end, host[i][2]);
    std::vector<double> e, f, d, s, pr;
    for (int64_t i = 0; i < ctas; ++i) {
      e.push_back((host[i][0] - t0) * 1e-3), f.push_back((host[i][1] - t0) * 1e-3);
      d.push_back((host[i][2] - t0) * 1e-3), s.push_back((host[i][2] - host[i][1]) * 1e-3);
      pr.push_back((host[i][3] - t0) * 1e-3);
    }
    span.push_back((t_end - t0) * 1e-3), skew.push_back(pct(e, 1.0)), first.push_back(pct(f, 0.5));
    done_min.push_back(pct(d, 0.0)), done_med.push_back(pct(d, 0.5)), done_max.push_back(pct(d, 1.0));
    stream.push_back(pct(s, 0.5)), prod_med.push_back(pct(pr, 0.5)), prod_max.push_back(pct(pr, 1.0));
  }
  const double bytes_per_cta = 2.0 * B * Lk * 8 * D * 2 / static_cast<double>(ctas);
  std::printf(
      "B=%3lld Lk=%6lld splits=%2d CTAs=%3lld | us from the first CTA's entry (medians of 7 launches): "
      "span %.1f, last entry %.1f, first K landed (median CTA) %.1f, consumers done min/median/max "
      "%.1f / %.1f / %.1f, producers done median/max %.1f / %.1f; a CTA's stream (median) %.1f us = %.1f "
      "GB/s "
      "a CTA\n",
      static_cast<long long>(B), static_cast<long long>(Lk), splits, static_cast<long long>(ctas),
      pct(span, 0.5), pct(skew, 0.5), pct(first, 0.5), pct(done_min, 0.5), pct(done_med, 0.5),
      pct(done_max, 0.5), pct(prod_med, 0.5), pct(prod_max, 0.5), pct(stream, 0.5),
      bytes_per_cta / pct(stream, 0.5) * 1e-3);
}
}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t kv = int64_t{8} * 131072 * 8 * 128, qo = int64_t{64} * 32 * 128;  // the largest shape
  const size_t flush_bytes = size_t{256} << 20;
  sm90_tune::Buffers buf{};
  void* flush = nullptr;
  if (cudaMalloc(&buf.q, qo * 2) || cudaMalloc(&buf.k, kv * 2) || cudaMalloc(&buf.v, kv * 2) ||
      cudaMalloc(&buf.o, qo * 2) || cudaMalloc(&buf.ref, qo * 2) || cudaMalloc(&buf.lse, qo / 128 * 4) ||
      cudaMalloc(&flush, flush_bytes)) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  cuda_test::fill_hash_bf16(buf.q, qo, 1);
  cuda_test::fill_hash_bf16(buf.k, kv, 2);
  cuda_test::fill_hash_bf16(buf.v, kv, 3);
  const struct { int64_t B, Lk; } shapes[] = {{1, 131072}, {8, 16384}, {8, 131072}, {64, 4096}, {1, 32768}};
  for (const auto& s : shapes) {
    buf.B = s.B, buf.Lq = 1, buf.Lk = s.Lk, buf.Hq = 32, buf.Hkv = 8, buf.splits = 0;
    probe(buf, flush, flush_bytes);
  }
  return 0;
}
