// tune_sm90_bwd_probe.cu: the sm90 backward's timeline, CTA by CTA (tune_sm90_bwd's last table).
// The library's kernel is built here with a probe (bwd_kernel.cuh: BwdProbePoint) that marks the
// global timer at a CTA's entry, K and V landed, the first step's Q and dO landed, the last
// step done, dK and dV stored (consumer 0), the loads issued (the loader) and the last dQ
// addition read (the dQ writer). One launch after the L2 is flushed: the medians say what a CTA
// spends outside its steps, and the gap on each SM between a CTA's last mark and the next one's
// entry what the launch of the next costs. Then a CTA's whole time (entry to its last mark) by
// its key block's position in the launch order, a quarter of the positions each: flat in the
// fast mode; in deterministic mode, where each query block's additions come in that order
// (bwd_order.h), a rise from the first quarter to the last is time spent waiting for turns. At D
// = 256 (bwd_pair.cuh, no step marks) only the whole time and the quarters.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/check.h"
#include "cuda/sm90/bwd_launch.cuh"

namespace {

constexpr int kMaxCtas = 8192, kSlots = 8;  // 7 points and the SM
__device__ unsigned long long g_marks[kMaxCtas][kSlots];

struct Timeline : tileattn::detail::sm90::BwdTuning {
  __device__ static void mark(tileattn::detail::sm90::BwdProbePoint point) {
    using tileattn::detail::sm90::kDqWritten;
    const bool producer_warp = point == kDqWritten || point == tileattn::detail::sm90::kLoadsIssued;
    if ((producer_warp ? threadIdx.x % 32 : threadIdx.x) != 0 || blockIdx.x >= kMaxCtas) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_marks[blockIdx.x][point] = t;
    if (point == tileattn::detail::sm90::kEntered) {
      unsigned sm_id;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_id));
      g_marks[blockIdx.x][kSlots - 1] = sm_id;
    }
  }
};

struct Direct : tileattn::detail::sm90::BwdTuning {
  static constexpr bool kStageDkDv = false;
};
struct DirectTimeline : Timeline {
  static constexpr bool kStageDkDv = false;
};

template <class Tuning>
void launch(const tileattn::detail::BackwardParams& b, const tileattn::detail::sm90::BwdParams& kp) {
  using namespace tileattn::detail;
  cuda::for_dtype_and_mask(b.fwd, [&](auto, auto mask) {
    using Mask = typename decltype(mask)::type;
    if (b.fwd.head_dim == 64)
      sm90::launch_bwd<64, __nv_bfloat16, Mask, false, false, Tuning>(b, kp);
    else if (b.fwd.head_dim == 128)
      sm90::launch_bwd<128, __nv_bfloat16, Mask, false, false, Tuning>(b, kp);
    else
      sm90::launch_bwd<256, __nv_bfloat16, Mask, false, false, Tuning>(b, kp);
  });
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// The kernel with dK and dV stored straight from the accumulators (BwdTuning::kStageDkDv off),
// at head dims 64 and 128.
void bwd_direct_kernel(const tileattn::detail::BackwardParams& b,
                       const tileattn::detail::sm90::BwdParams& kp) {
  launch<Direct>(b, kp);
}

// One probed launch of b's dense bf16 kernel (head dim 64, 128 or 256; direct: dK and dV stored
// straight, at 64 and 128); steps: a CTA's steps without a mask. Prints a line of medians and one
// of whole times by position quarter, microseconds; deterministic mode where kp.dq_order is set.
void bwd_timeline(const tileattn::detail::BackwardParams& b, const tileattn::detail::sm90::BwdParams& kp,
                  int steps, bool direct, void* flush, size_t flush_bytes) {
  using namespace tileattn::detail;
  const int64_t ctas = kp.n_blocks * kp.heads_kv * kp.batch;
  const int64_t D = b.fwd.head_dim;
  if (ctas > kMaxCtas || b.fwd.seqs.ragged() || (D != 64 && D != 128 && D != 256) || (direct && D == 256)) {
    std::printf(
        " not probed (dense batches at head dims 64, 128 and 256, direct not at 256, up to %d CTAs)\n",
        kMaxCtas);
    return;
  }
  std::vector<unsigned long long> zero(kMaxCtas * kSlots, 0);
  TILEATTN_CUDA_CHECK(cudaMemcpyToSymbol(g_marks, zero.data(), zero.size() * sizeof(zero[0])));
  TILEATTN_CUDA_CHECK(cudaMemset(flush, 0, flush_bytes));
  if (direct)
    launch<DirectTimeline>(b, kp);
  else
    launch<Timeline>(b, kp);
  TILEATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> m(ctas * kSlots);
  TILEATTN_CUDA_CHECK(cudaMemcpyFromSymbol(m.data(), g_marks, m.size() * sizeof(m[0])));
  const auto at = [&](int64_t c, int point) { return static_cast<double>(m[c * kSlots + point]); };
  unsigned long long t0 = ~0ull, t_end = 0;
  std::vector<double> kv, first, steps_us, store, writer, life, by_quarter[4];
  for (int64_t c = 0; c < ctas; ++c) {
    t0 = std::min(t0, m[c * kSlots + sm90::kEntered]);
    const double end =
        std::max({at(c, sm90::kDkDvStored), at(c, sm90::kDqWritten), at(c, sm90::kLoadsIssued)});
    t_end = std::max(t_end, static_cast<unsigned long long>(end));
    kv.push_back(at(c, sm90::kKvReady) - at(c, sm90::kEntered));
    first.push_back(at(c, sm90::kFirstStepReady) - at(c, sm90::kKvReady));
    steps_us.push_back(at(c, sm90::kStepsDone) - at(c, sm90::kFirstStepReady));
    store.push_back(at(c, sm90::kDkDvStored) - at(c, sm90::kStepsDone));
    writer.push_back(at(c, sm90::kDqWritten) - at(c, sm90::kStepsDone));
    life.push_back(end - at(c, sm90::kEntered));
    by_quarter[4 * (c % kp.n_blocks) / kp.n_blocks].push_back(life.back());
  }
  // On each SM, CTAs in order of entry: the next one's entry after this one's last mark.
  std::vector<std::vector<std::pair<double, double>>> by_sm(256);
  for (int64_t c = 0; c < ctas; ++c)
    by_sm[m[c * kSlots + kSlots - 1] % 256].push_back(
        {at(c, sm90::kEntered),
         std::max({at(c, sm90::kDkDvStored), at(c, sm90::kDqWritten), at(c, sm90::kLoadsIssued)})});
  std::vector<double> gap;
  for (auto& v : by_sm) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) gap.push_back(v[i].first - v[i - 1].second);
  }
  const double us = 1e-3;
  if (D == 256) {
    std::printf("  %5lld CTAs: launch %7.1f | a CTA whole %7.2f |", static_cast<long long>(ctas),
                (t_end - t0) * us, median(life) * us);
  } else {
    std::printf(
        "  %5lld CTAs of %3d steps: launch %7.1f | a CTA: K/V %6.2f, first Q/dO %6.2f, steps %7.2f (%5.2f a "
        "step), "
        "dK/dV stored %5.2f, last dQ read %5.2f, whole %7.2f | gap to the next CTA on its SM %5.2f\n",
        static_cast<long long>(ctas), steps, (t_end - t0) * us, median(kv) * us, median(first) * us,
        median(steps_us) * us, median(steps_us) * us / std::max(1, steps), median(store) * us,
        median(writer) * us, median(life) * us, median(gap) * us);
  }
  std::printf("  %s, whole by position quarter:", kp.dq_order != nullptr ? "deterministic" : "fast");
  for (const auto& q : by_quarter) std::printf(" %7.2f", median(q) * us);
  std::printf("\n");
}
