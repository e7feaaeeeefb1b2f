// tune_sm90_probe: where a split-KV decode kernel's time goes, CTA by CTA. The serving kernel
// (D = 128, block_n 128, two stages, persistent) is built here with TILEATTN_SM90_PROBE marking
// four points of each CTA with the global timer: entry, its first K block landed (consumer 0),
// consumer 0 done with its tiles, the producer done. One launch after an L2 flush; the spread
// of those points over the CTAs separates launch skew, start-up, streaming and the tail. Each
// CTA's SM is recorded too: whether the slow CTAs are the same SMs launch after launch, or of
// one KV head (its addresses), decides how the tail can be balanced.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/sm90/barrier.cuh"

namespace {
constexpr int kMaxCtas = 1024;
__device__ unsigned long long g_probe[kMaxCtas][5];

template <class S>
__device__ void probe_mark(const S& sm, int point) {
  const bool producer = point == 0 || point == 3;
  if (threadIdx.x != (producer ? 0 : 128) || blockIdx.x >= kMaxCtas) return;
  if (point == 1) tileattn::detail::sm90::mbarrier_wait<false>(sm.k_full(0), 0);
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_probe[blockIdx.x][point] = t;
  if (point == 3) {
    unsigned sm_id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_id));
    g_probe[blockIdx.x][4] = sm_id;
  }
}
}  // namespace

#define TILEATTN_SM90_PROBE(sm, point) probe_mark(sm, point)

#include "fill.h"
#include "tune_sm90.cuh"

namespace {
using namespace tileattn;
// The library's decode config (two stages, V by the producer warpgroup's warps 1-3; the
// producer's marks are warp 0's, K's loads).
using C = sm90_tune::Cfg<detail::sm90::serving_tile_config(128)>;  // this binary's type: its kernels carry
                                                                   // the probe

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

// Pearson correlation of two launches' producer finish times over the SMs both used.
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  double n = 0, sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0)
      n += 1, sa += a[i], sb += b[i], saa += a[i] * a[i], sbb += b[i] * b[i], sab += a[i] * b[i];
  const double va = saa - sa * sa / n, vb = sbb - sb * sb / n;
  return n > 2 && va > 0 && vb > 0 ? (sab - sa * sb / n) / std::sqrt(va * vb) : 0.0;
}

// Is a slow CTA slow because of its SM (the same SMs slow in every launch), or because of its
// KV head (CTA i computes split i % splits of group i / splits; group % 8 is the KV head)?
void spread_report(const std::vector<std::vector<double>>& by_sm,
                   const std::vector<std::vector<double>>& by_cta, int splits) {
  std::printf("  producer finish by SM, correlation of launch r with launch 0:");
  for (size_t r = 1; r < by_sm.size(); ++r) std::printf(" %.2f", correlation(by_sm[0], by_sm[r]));
  std::printf("\n  by CTA index, launch r with launch 0:");
  for (size_t r = 1; r < by_cta.size(); ++r) std::printf(" %.2f", correlation(by_cta[0], by_cta[r]));
  std::printf("\n  by KV head (launch 0), min/median/max us:");
  for (int hk = 0; hk < 8; ++hk) {
    std::vector<double> t;
    for (size_t i = 0; i < by_cta[0].size(); ++i)
      if (static_cast<int>(i / splits) % 8 == hk) t.push_back(by_cta[0][i]);
    if (!t.empty()) std::printf(" [%d] %.1f/%.1f/%.1f", hk, pct(t, 0.0), pct(t, 0.5), pct(t, 1.0));
  }
  std::printf("\n");
}

void probe(const sm90_tune::Buffers& buf, void* flush, size_t flush_bytes) {
  const detail::AttnParams p = sm90_tune::params_of(buf, 128, false);
  const int64_t B = buf.B, Lk = buf.Lk, D = 128;
  const detail::sm90::LaunchShape shape = detail::sm90::launch_shape<C>(p);
  const int pack = shape.pack, splits = shape.splits;
  const int64_t tiles = B * (32 / pack);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t ctas = std::min<int64_t>(tiles * splits, sms);
  std::vector<std::vector<double>> by_sm(7, std::vector<double>(256, -1.0)), by_cta(7);
  std::vector<double> span, skew, first, done_min, done_med, done_max, stream, prod_med, prod_max;
  for (int rep = 0; rep < 7; ++rep) {
    unsigned long long host[kMaxCtas][5] = {};
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
      by_sm[rep][host[i][4] % 256] = pr.back();
    }
    by_cta[rep] = pr;
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
  spread_report(by_sm, by_cta, splits);
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
  // splits 0: the heuristic's count; 32 at 1 x 128k: two tiles a CTA, drawn from the counter.
  const struct {
    int64_t B, Lk;
    int splits;
  } shapes[] = {{1, 131072, 0}, {8, 16384, 0}, {8, 131072, 0}, {64, 4096, 0}, {1, 32768, 0}, {1, 131072, 32}};
  for (const auto& s : shapes) {
    buf.B = s.B, buf.Lq = 1, buf.Lk = s.Lk, buf.Hq = 32, buf.Hkv = 8, buf.splits = s.splits;
    probe(buf, flush, flush_bytes);
  }
  return 0;
}
