// tune_sm90_fwd_probe: where the dense sm90 forward's time goes on short rows, tile by tile.
// The library's configs are built here with TILEATTN_SM90_TILE_PROBE marking seven points of
// each consumer's tiles with the SM's cycle counter (mainloop.cuh, consume_tile): entry, Q
// landed, block 0's softmax done, the steady steps done, the last P V done, the skipped tail
// walked, the epilogue issued. Printed: the cycles of each phase summed over every consumer
// and tile, as shares of the consumers' whole time, and per tile by the blocks a consumer
// computed. D = 64 causal at L = 512 and 1k is where cuDNN leads the most.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {
constexpr int kMaxCtas = 160, kConsumers = 3, kTiles = 64, kPoints = 8;  // point 7: own blocks
__device__ long long g_tl[kMaxCtas][kConsumers][kTiles][kPoints];

// Inside the epilogue (epilogue.cuh's three points), of the tile tile_mark's point 0 last saw.
__device__ long long g_ep[kMaxCtas][kConsumers][kTiles][3];
__device__ int g_tile[kMaxCtas][kConsumers];

__device__ void tile_mark(int consumer, int64_t tile, int point, int64_t own) {
  if (threadIdx.x % 128 != 0 || blockIdx.x >= kMaxCtas || tile >= kTiles) return;
  g_tl[blockIdx.x][consumer][tile][point] = clock64();
  if (point == 0) g_tile[blockIdx.x][consumer] = static_cast<int>(tile);
  if (point == 6) g_tl[blockIdx.x][consumer][tile][7] = own;
}
__device__ void epilogue_mark(int consumer, int point) {
  if (threadIdx.x % 128 != 0 || blockIdx.x >= kMaxCtas) return;
  const int tile = g_tile[blockIdx.x][consumer];
  if (tile < kTiles) g_ep[blockIdx.x][consumer][tile][point] = clock64();
}
}  // namespace

#define TILEATTN_SM90_TILE_PROBE(consumer, tile, point, own) tile_mark(consumer, tile, point, own)
#define TILEATTN_SM90_EPILOGUE_PROBE(consumer, point) epilogue_mark(consumer, point)

#include "fill.h"
#include "tune_sm90.cuh"

namespace {
using namespace tileattn;
// 0-1 Q wait, 1-2 first block, 2-3 steady, 3-4 last PV, 4-5 tail, 5-6 epilogue, to the next
// tile's 0; a consumer whose rows all lie past the tile's (or a tile without key blocks) reaches
// neither 2 nor 5: its 1-6 is "idle walk", and its tiles are counted apart (own=-).
constexpr int kPhases = 8;
const char* const kPhaseNames[kPhases] = {"Q wait",       "block 0",  "steady",       "last PV",
                                          "skipped tail", "epilogue", "to next tile", "idle walk"};

template <class C, class Mask>
void probe(const sm90_tune::Buffers& buf, bool causal) {
  constexpr int64_t D = C::kCfg.head_dim;
  const detail::AttnParams p = sm90_tune::params_of(buf, D, causal);
  const detail::sm90::LaunchShape shape = detail::sm90::launch_shape<C>(p);
  std::vector<long long> host(size_t{kMaxCtas} * kConsumers * kTiles * kPoints),
      ep(size_t{kMaxCtas} * kConsumers * kTiles * 3);
  float ms = 0;
  for (int rep = 0; rep < 3; ++rep) {  // the last of three launches, back to back
    std::fill(host.begin(), host.end(), 0);
    std::fill(ep.begin(), ep.end(), 0);
    cudaMemcpyToSymbol(g_tl, host.data(), host.size() * sizeof(long long));
    cudaMemcpyToSymbol(g_ep, ep.data(), ep.size() * sizeof(long long));
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a);
    detail::sm90::launch<C, __nv_bfloat16, Mask, false>(p, shape.pack, shape.splits);
    cudaEventRecord(b);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
      return;
    }
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a), cudaEventDestroy(b);
  }
  cudaMemcpyFromSymbol(host.data(), g_tl, host.size() * sizeof(long long));
  cudaMemcpyFromSymbol(ep.data(), g_ep, ep.size() * sizeof(long long));
  auto at = [&](int cta, int c, int t, int pt) {
    return host[((static_cast<size_t>(cta) * kConsumers + c) * kTiles + t) * kPoints + pt];
  };
  auto at_ep = [&](int cta, int c, int t, int pt) {
    return ep[((static_cast<size_t>(cta) * kConsumers + c) * kTiles + t) * 3 + pt];
  };
  // The epilogue of tiles with rows, split at its three inner points: to the first barrier (the
  // totals and the last store's read), O / l and the LSE written, the fence and the second
  // barrier, the TMA store issued and (unless deferred) its read waited for.
  double split[4] = {}, n_split = 0;
  double sum[kPhases] = {}, by_own[8][kPhases] = {}, n_own[8] = {};
  double whole = 0;
  long long tiles = 0;
  for (int cta = 0; cta < kMaxCtas; ++cta)
    for (int c = 0; c < C::kCfg.consumers; ++c) {
      long long first = 0, last = 0;
      for (int t = 0; t < kTiles && at(cta, c, t, 6) != 0; ++t) {
        ++tiles;
        if (t == 0) first = at(cta, c, t, 0);
        last = at(cta, c, t, 6);
        const long long prev = at(cta, c, t, 1);
        double ph[kPhases] = {static_cast<double>(prev - at(cta, c, t, 0))};
        const bool idle = at(cta, c, t, 2) == 0;
        if (idle)
          ph[7] = static_cast<double>(at(cta, c, t, 6) - prev);
        else
          for (int pt = 2; pt <= 6; ++pt)
            ph[pt - 1] = static_cast<double>(at(cta, c, t, pt) - at(cta, c, t, pt - 1));
        if (t + 1 < kTiles && at(cta, c, t + 1, 0) != 0)
          ph[6] = static_cast<double>(at(cta, c, t + 1, 0) - last);
        // Blocks computed (own): 1 .. 6, 7 for 7 or more, 0 for the idle tiles.
        const int own = idle ? 0 : static_cast<int>(std::min<long long>(at(cta, c, t, 7), 7));
        if (!idle && at_ep(cta, c, t, 0) != 0 && at_ep(cta, c, t, 2) != 0) {
          const long long e[5] = {at(cta, c, t, 5), at_ep(cta, c, t, 0), at_ep(cta, c, t, 1),
                                  at_ep(cta, c, t, 2), at(cta, c, t, 6)};
          for (int i = 0; i < 4; ++i) split[i] += static_cast<double>(e[i + 1] - e[i]);
          n_split += 1;
        }
        for (int i = 0; i < kPhases; ++i) sum[i] += ph[i], by_own[own][i] += ph[i];
        n_own[own] += 1;
      }
      whole += static_cast<double>(last - first);
    }
  std::printf(
      "D=%3lld causal=%d B=%lld L=%lld H=%lld: %.3f ms, %lld consumer tiles; cycles by phase (share of "
      "the consumers' time from first entry to last epilogue):",
      static_cast<long long>(D), causal, static_cast<long long>(buf.B), static_cast<long long>(buf.Lq),
      static_cast<long long>(buf.Hq), ms, tiles);
  for (int i = 0; i < kPhases; ++i) std::printf(" %s %.1f%%", kPhaseNames[i], 100.0 * sum[i] / whole);
  std::printf("\n  per consumer tile, mean cycles, by blocks computed:");
  for (int own = 0; own < 8; ++own) {
    if (n_own[own] == 0) continue;
    if (own == 0)
      std::printf("\n    own=- (%5.0f tiles):", n_own[own]);
    else
      std::printf("\n    own=%d%s (%5.0f tiles):", own, own == 7 ? "+" : "", n_own[own]);
    for (int i = 0; i < kPhases; ++i) std::printf(" %s %6.0f", kPhaseNames[i], by_own[own][i] / n_own[own]);
  }
  if (n_split > 0)
    std::printf(
        "\n  epilogue of a tile with rows, mean cycles: to the first barrier %.0f, O / l and LSE written "
        "%.0f, fence and second barrier %.0f, TMA store (and its read) %.0f",
        split[0] / n_split, split[1] / n_split, split[2] / n_split, split[3] / n_split);
  std::printf("\n");
}
}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t n = int64_t{16384} * 2048;  // B x L x H x D of every shape below
  sm90_tune::Buffers buf{};
  if (!sm90_tune::alloc_filled(&buf, n)) return 1;
  // The library's configs as types of this binary (the library's own kernel types, instantiated
  // here with the probe's marks, would be a second definition of the same kernels).
  using D64 = sm90_tune::Cfg<detail::sm90::tile_config(64)>;
  using D128 = sm90_tune::Cfg<detail::sm90::tile_config(128)>;
  for (const int64_t L : {512, 1024, 4096}) {
    buf.B = 16384 / L, buf.Lq = buf.Lk = L;
    buf.Hq = buf.Hkv = 32;
    probe<D64, detail::CausalMask>(buf, true);
    probe<D64, detail::NoMask>(buf, false);
    buf.Hq = buf.Hkv = 16;
    probe<D128, detail::CausalMask>(buf, true);
  }
  return 0;
}
