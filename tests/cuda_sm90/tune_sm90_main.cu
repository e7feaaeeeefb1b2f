// tune_sm90 [L...]: the sm90 configs of tune_sm90_d*.cu at each L (default 2048 8192), bf16,
// B = 16384 / L, H = 2048 / D, causal off and on; then GQA decoding shapes (tune_sm90_decode.cu).
// TUNE_D=64|128|256: that head dim's configs alone, no decoding shapes (a shorter GPU call).
#include <cstdio>
#include <cstdlib>

#include "fill.h"
#include "tune_sm90.cuh"

int main(int argc, char** argv) {
  using namespace tileattn;
  using namespace tileattn::sm90_tune;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is printed, also if a later one aborts
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {2048, 8192};
  const char* only_env = std::getenv("TUNE_D");
  const int only = only_env != nullptr ? std::atoi(only_env) : 0;
  const auto wanted = [&](int d) { return only == 0 || only == d; };
  const int64_t n = int64_t{16384} * 2048;  // elements of each buffer: the largest problem below
  Buffers buf{};
  if (!alloc_filled(&buf, n)) return 1;
  for (int64_t L : lengths) {
    buf.B = 16384 / L, buf.Lq = buf.Lk = L;
    for (bool causal : {false, true}) {
      buf.Hq = buf.Hkv = 2048 / 64;
      if (wanted(64)) {
        tune_d64(buf, causal);
        tune_d64_order(buf, causal);
      }
      buf.Hq = buf.Hkv = 2048 / 128;
      if (wanted(128)) {
        tune_d128(buf, causal);
        tune_d128_order(buf, causal);
      }
      buf.Hq = buf.Hkv = 2048 / 256;
      if (wanted(256)) tune_d256(buf, causal);
    }
  }
  // GQA with short rows (decoding, speculative decoding): 32 query heads on 4 KV heads, a few
  // long sequences (CTAs fewer than SMs either way) and many short ones.
  const struct {
    int64_t B, Lq, Lk;
  } decode[] = {{4, 1, 8192}, {4, 16, 8192}, {64, 1, 1024}, {64, 16, 1024}, {64, 64, 1024}};
  for (const auto& d : decode) {
    if (only != 0) break;
    buf.B = d.B, buf.Lq = d.Lq, buf.Lk = d.Lk, buf.Hq = 32, buf.Hkv = 4;
    tune_decode(buf, d.Lq > 1);
  }
  for (void* ptr : {buf.q, buf.k, buf.v, buf.o, buf.ref, static_cast<void*>(buf.lse)}) cudaFree(ptr);
  return 0;
}
