// tune_sm90_split: split-KV decoding (one query, 32 query heads on 8 KV heads, D = 128, bf16, the
// library's split count) under alternative rings of K and V: block_n and the stage count decide
// how many bytes a CTA has in flight. Each variant is the serving kernel alone (bf16, no mask),
// in its own file (tune_sm90_split_*.cu) so that they compile side by side; the output is
// compared with the library's on the same inputs. Prints GB/s of K and V read, each call timed
// alone after an L2 flush (as the benchmark times). The v_warps variants load V by cp.async from
// the producer warpgroup's other warps, K staying on TMA.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "fill.h"
#include "tune_sm90.cuh"

namespace tileattn::sm90_tune {
void split_n128_s2(const Buffers& b);
void split_n128_s3(const Buffers& b);
void split_n64_s4(const Buffers& b);
void split_n128_s2_vwarps(const Buffers& b);
void split_n128_s3_vwarps(const Buffers& b);
void split_n128_s3_vwarps_nopp(const Buffers& b);
void split_paged(const Buffers& b);
}  // namespace tileattn::sm90_tune

int main() {
  using namespace tileattn::sm90_tune;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const struct {
    int64_t B, Lk;
  } shapes[] = {{1, 131072}, {8, 16384}, {64, 4096}, {1, 32768}, {8, 131072}, {64, 32768}};
  const int64_t kv = int64_t{64} * 32768 * 8 * 128, qo = int64_t{64} * 32 * 128;  // the largest shapes
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
  // Pages of 16 and of 64 keys, K and V by TMA boxes a page, under the library's ring and two
  // deeper ones: in a random order (fixed seed), then in order (each sequence's pages one after
  // another: the contiguous cache's bytes, read in boxes of a page), which tells the scatter's
  // cost from the boxes'.
  if (cudaMalloc(&buf.kp, kv * 2) || cudaMalloc(&buf.vp, kv * 2)) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  int32_t* table = nullptr;
  for (const bool shuffled : {true, false})
    for (const int64_t page : {16, 64}) {
      std::printf("pages of %d, %s\n", static_cast<int>(page), shuffled ? "random order" : "in order");
      for (const auto& s : shapes) {
        if (s.Lk % 128 != 0) continue;  // whole blocks of whole pages: no lookup past a sequence's pages
        const int64_t pages = s.B * s.Lk / page, page_bytes = page * 8 * 128 * 2;
        std::vector<int32_t> perm(static_cast<size_t>(pages));
        std::iota(perm.begin(), perm.end(), 0);
        if (shuffled) std::shuffle(perm.begin(), perm.end(), std::mt19937(11));
        if (table) cudaFree(table);
        if (cudaMalloc(&table, pages * 4) ||
            cudaMemcpy(table, perm.data(), pages * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
          std::printf("page table failed\n");
          return 1;
        }
        scatter_pages(buf.k, buf.kp, table, pages, page_bytes);
        scatter_pages(buf.v, buf.vp, table, pages, page_bytes);
        buf.B = s.B, buf.Lq = 1, buf.Lk = s.Lk, buf.Hq = 32, buf.Hkv = 8, buf.splits = 0;
        buf.page_size = static_cast<int>(page), buf.table = table;
        split_paged(buf);
        split_n128_s3(buf);  // a third stage, and 64 keys x 4: more boxes in flight (the table's latency)
        split_n64_s4(buf);
        buf.page_size = 0;
      }
    }
  cudaFree(table);
  for (void* ptr : {buf.q, buf.k, buf.v, buf.o, buf.ref, static_cast<void*>(buf.lse), buf.kp, buf.vp})
    cudaFree(ptr);
  return 0;
}
