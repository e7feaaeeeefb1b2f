// tune_sm90_split: split-KV decoding (one query, 32 query heads on 8 KV heads, D = 128, bf16, the
// library's split count) under alternative rings of K and V: block_n and the stage count decide
// how many bytes a CTA has in flight. Each variant is the serving kernel alone (bf16, no mask),
// in its own file (tune_sm90_split_*.cu) so that they compile side by side; the output is
// compared with the library's on the same inputs. Prints GB/s of K and V read. The v_warps
// variants load V by cp.async from the producer warpgroup's other warps, K staying on TMA.
#include <cstdio>

#include "fill.h"
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {
void split_n128_s2(const Buffers& b);
void split_n128_s3(const Buffers& b);
void split_n64_s4(const Buffers& b);
void split_n64_s6(const Buffers& b);
void split_n128_s2_vwarps(const Buffers& b);
void split_n128_s3_vwarps(const Buffers& b);
void split_n128_s3_vwarps_nopp(const Buffers& b);
}  // namespace tileattn::sm90_tune

int main() {
  using namespace tileattn::sm90_tune;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const struct { int64_t B, Lk; } shapes[] = {{1, 131072}, {8, 16384}, {64, 4096}, {1, 32768}, {8, 131072}};
  const int64_t kv = int64_t{8} * 131072 * 8 * 128, qo = int64_t{64} * 32 * 128;  // the largest shapes
  Buffers buf{};
  if (cudaMalloc(&buf.q, qo * 2) || cudaMalloc(&buf.k, kv * 2) || cudaMalloc(&buf.v, kv * 2) ||
      cudaMalloc(&buf.o, qo * 2) || cudaMalloc(&buf.ref, qo * 2) || cudaMalloc(&buf.lse, qo / 128 * 4)) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  tileattn::cuda_test::fill_hash_bf16(buf.q, qo, 1);
  tileattn::cuda_test::fill_hash_bf16(buf.k, kv, 2);
  tileattn::cuda_test::fill_hash_bf16(buf.v, kv, 3);
  for (const auto& s : shapes) {
    buf.B = s.B, buf.Lq = 1, buf.Lk = s.Lk, buf.Hq = 32, buf.Hkv = 8, buf.splits = 0;
    split_n128_s2(buf);
    split_n128_s2_vwarps(buf);
    split_n128_s3(buf);
    split_n128_s3_vwarps(buf);
    split_n128_s3_vwarps_nopp(buf);
    split_n64_s4(buf);
  }
  for (void* ptr : {buf.q, buf.k, buf.v, buf.o, buf.ref, static_cast<void*>(buf.lse)}) cudaFree(ptr);
  return 0;
}
