// io_model.cc: the traffic formulas of docs/io_model.md, counted exactly over the query tiles.
#include "io_model.h"

#include <algorithm>
#include <string>

// The CPU kernel's tile choice, read from the library's own header (header-only, no other
// dependency) so that the model cannot drift from the kernel it describes.
#include "cpu/tile_config.h"
#include "cuda/sm80/tile_config.h"
#include "cuda/sm90/tile_config.h"
#include "tileattn/version.h"

namespace tileattn::cli {
namespace {

constexpr int64_t kLseBytes = 4;  // LSE is fp32 whatever the working dtype

int64_t elem_bytes(DType dtype) { return static_cast<int64_t>(dtype_size(dtype)); }

}  // namespace

Tiles cpu_tiles(const Shape& s, int threads) {
  const auto t = detail::cpu::tile_config(s.head_dim, s.seqlen_q, s.batch * s.heads_q, threads);
  return Tiles{t.block_q, t.block_k};
}

bool cpu_bf16_pairs(DType dtype, int64_t head_dim) {
  return detail::cpu::bf16_pairs(dtype == DType::kBFloat16, std::string(cpu_isa()) == "amx", head_dim);
}

Tiles gpu_tiles(const Shape& s, Kernel kernel) {
  if (kernel == Kernel::kCudaSm90) {
    const auto t = detail::sm90::tile_config(s.head_dim);
    return Tiles{t.block_m(), t.block_n};
  }
  const auto t = detail::sm80::tile_config(detail::sm80::padded_head_dim(s.head_dim));
  return Tiles{t.block_m, t.block_n};
}

Traffic eager_traffic(const Shape& s, DType dtype) {
  const int64_t e = elem_bytes(dtype);
  const int64_t q = s.batch * s.heads_q * s.seqlen_q * s.head_dim * e;
  const int64_t kv_per_q_head = s.batch * s.heads_q * s.seqlen_k * s.head_dim * e;
  const int64_t sp = s.batch * s.heads_q * s.seqlen_q * s.seqlen_k * e;
  const int64_t lse = s.batch * s.heads_q * s.seqlen_q * kLseBytes;
  Traffic t;
  t.read = q + kv_per_q_head      // pass 1 reads Q and K
           + sp                   // pass 2 reads S
           + sp + kv_per_q_head;  // pass 3 reads P and V
  t.written = sp                  // pass 1 writes S
              + sp                // pass 2 writes P
              + q + lse;          // pass 3 writes O (the size of Q), pass 2 LSE
  return t;
}

int64_t tiled_keys_for_tile(const Shape& s, bool causal, int64_t q1, int64_t block_k) {
  // Bottom-right causal alignment: query i sees keys j <= i + (Lk - Lq), so the tile's last row
  // bounds the keys it visits.
  int64_t k_end = s.seqlen_k;
  if (causal) k_end = std::clamp<int64_t>(q1 - 1 + (s.seqlen_k - s.seqlen_q) + 1, 0, s.seqlen_k);
  const int64_t blocks = (k_end + block_k - 1) / block_k;
  return std::min(s.seqlen_k, blocks * block_k);
}

Traffic tiled_traffic(const Shape& s, DType dtype, bool causal, Tiles tiles) {
  const int64_t block_q = tiles.block_q, block_k = tiles.block_k;
  const int64_t e = elem_bytes(dtype);
  int64_t keys = 0;  // keys read by all query tiles of one (batch, head)
  for (int64_t q0 = 0; q0 < s.seqlen_q; q0 += block_q)
    keys += tiled_keys_for_tile(s, causal, std::min(s.seqlen_q, q0 + block_q), block_k);
  const int64_t q = s.batch * s.heads_q * s.seqlen_q * s.head_dim * e;
  const int64_t kv = 2 * s.batch * s.heads_q * keys * s.head_dim * e;
  Traffic t;
  t.read = q + kv;
  t.written = q + s.batch * s.heads_q * s.seqlen_q * kLseBytes;  // O, then LSE
  return t;
}

Traffic tiled_traffic_kv_once(const Shape& s, DType dtype) {
  const int64_t e = elem_bytes(dtype);
  const int64_t q = s.batch * s.heads_q * s.seqlen_q * s.head_dim * e;
  Traffic t;
  t.read = q + 2 * s.batch * s.heads_kv * s.seqlen_k * s.head_dim * e;
  t.written = q + s.batch * s.heads_q * s.seqlen_q * kLseBytes;
  return t;
}

int64_t eager_extra_bytes(const Shape& s, DType dtype) {
  return 2 * s.batch * s.heads_q * s.seqlen_q * s.seqlen_k * elem_bytes(dtype);
}

int64_t tiled_workspace_bytes(int threads, Tiles tiles, int64_t head_dim) {
  const int64_t block_q = tiles.block_q, block_k = tiles.block_k;
  const int64_t floats =
      block_q * head_dim + head_dim * block_k + block_k * head_dim + block_q * block_k + block_q * head_dim;
  return static_cast<int64_t>(threads) * floats * 4;
}

}  // namespace tileattn::cli
