// cuda_limits.cc: what the CUDA kernels accept, as a pure function of the problem.
#include <array>
#include <cstdint>
#include <string>

#include "cuda/sm80/tile_config.h"
#include "cuda/sm90/tile_config.h"
#include "dispatch/limits.h"
#include "dispatch/select.h"

namespace tileattn::detail {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

// The sm90 kernel, on top of the sm80 kernel's checks: head dims 64, 128 and 256 only (the
// compiled configs), nonempty sequences and nonzero strides (TMA maps; a packed varlen tensor's
// batch stride is not used).
std::string sm90_rejects(const AttnParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim " + str(p.head_dim) + " has no sm90 kernel (64, 128 and 256 do)";
  if (p.seqlen_q == 0 || p.seqlen_k == 0) return "an empty sequence has no TMA map";
  const bool packed[4] = {p.seqs.cu_q != nullptr, p.seqs.cu_k != nullptr, p.seqs.cu_k != nullptr,
                          p.seqs.cu_q != nullptr};
  const Strides4* strides[4] = {&p.q_stride, &p.k_stride, &p.v_stride, &p.out_stride};
  for (int i = 0; i < 4; ++i)
    if ((!packed[i] && strides[i]->b <= 0) || strides[i]->l <= 0 || strides[i]->h <= 0)
      return "a zero stride has no TMA map";
  return {};
}

}  // namespace

// A paged cache's key block loads as TMA boxes that each lie in one page and start on a
// swizzle atom (sm90/tile_config.h, page_box); other page sizes, and left padding (which would
// shift the boxes off the atoms), are gathered row by row with cp.async (sm90/gather.cuh).
bool sm90_gathers(const AttnParams& p) {
  return p.page_table != nullptr &&
         sm90::gathers_pages(p.page_size, p.seqs.start_k != nullptr,
                             sm90::tile_config(static_cast<int>(p.head_dim)).block_n);
}

namespace {

// Four [B, L, H, D] tensors as the kernels read and write them: D contiguous, 16-byte cp.async
// and vector stores, so every row start 16-byte aligned.
Rejection layout_rejects(std::array<const char*, 4> names, std::array<const Strides4*, 4> strides,
                         std::array<const void*, 4> ptrs) {
  for (int i = 0; i < 4; ++i) {
    const Strides4& s = *strides[i];
    if (s.d != 1) return {names[i], "head_dim stride is " + str(s.d) + "; CUDA needs it to be 1"};
    if (s.b % 8 || s.l % 8 || s.h % 8)
      return {names[i], "strides (" + str(s.b) + ", " + str(s.l) + ", " + str(s.h) +
                            ") must be multiples of 8 elements (16 bytes) on CUDA"};
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16) return {names[i], "data pointer is not 16-byte aligned"};
  }
  return {};
}

}  // namespace

Rejection cuda_kernel_rejects(const AttnParams& p, Kernel kernel) {
  if (kernel == Kernel::kCudaSm90) {  // what sm80 takes, narrowed
    if (Rejection r = cuda_kernel_rejects(p, Kernel::kCudaSm80); !r.ok()) return r;
    return {"q", sm90_rejects(p)};
  }
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return {"q",
            std::string("dtype ") + dtype_name(p.dtype) + " is not supported on CUDA; expected fp16 or bf16"};
  // Head dims are compiled for 64, 96, 128 and 256; other multiples of 8 run padded to the next.
  if (p.head_dim % 8 != 0 || p.head_dim > kCudaMaxHeadDim || sm80::padded_head_dim(p.head_dim) == 0)
    return {"q", "head_dim " + str(p.head_dim) +
                     " is not supported on CUDA; expected a multiple of 8 up to " + str(kCudaMaxHeadDim)};
  if (Rejection r =
          layout_rejects({"q", "k", "v", "out"}, {&p.q_stride, &p.k_stride, &p.v_stride, &p.out_stride},
                         {p.q, p.k, p.v, p.out});
      !r.ok())
    return r;
  if (p.lse != nullptr && reinterpret_cast<uintptr_t>(p.lse) % 4)
    return {"lse", "data pointer is not 4-byte aligned"};
  // The kernel indexes positions within a sequence with 32-bit ints (memory offsets are 64-bit).
  constexpr int64_t kMaxSeqlen = (int64_t{1} << 30) - 1;
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen)
    return {"q", "seqlen_q " + str(p.seqlen_q) + " and seqlen_k " + str(p.seqlen_k) +
                     " must be below 2^30 on CUDA"};
  // One CTA per (batch, head, query tile) on grid.x, whose limit is 2^31 - 1.
  const int64_t block_m = sm80::tile_config(sm80::padded_head_dim(p.head_dim)).block_m;
  const int64_t m_blocks = (p.seqlen_q + block_m - 1) / block_m;
  const int64_t max_ctas = (int64_t{1} << 31) - 1;
  if (p.batch > 0 && p.heads_q > 0 && m_blocks > max_ctas / p.batch / p.heads_q)
    return {"q", "batch * heads * ceil(seqlen_q / " + str(block_m) + ") = " + str(p.batch) + " * " +
                     str(p.heads_q) + " * " + str(m_blocks) +
                     " exceeds the CUDA grid limit of 2^31 - 1 tiles"};
  return {};
}

Rejection cuda_backward_rejects(const BackwardParams& b) {
  if (Rejection r = layout_rejects({"dout", "dq", "dk", "dv"},
                                   {&b.dout_stride, &b.dq_stride, &b.dk_stride, &b.dv_stride},
                                   {b.dout, b.dq, b.dk, b.dv});
      !r.ok())
    return r;
  if (b.dlse != nullptr && reinterpret_cast<uintptr_t>(b.dlse) % 4)
    return {"dlse", "data pointer is not 4-byte aligned"};
  // One CTA per (batch, head, 64 rows) and per (batch, KV head, 64 keys) on grid.x.
  const AttnParams& p = b.fwd;
  const int64_t max_ctas = (int64_t{1} << 31) - 1, m_blocks = (p.seqlen_q + 63) / 64,
                n_blocks = (p.seqlen_k + 63) / 64;
  if (p.batch > 0 && p.heads_q > 0 && m_blocks > max_ctas / p.batch / p.heads_q)
    return {"q",
            "batch * heads * ceil(seqlen_q / 64) exceeds the CUDA grid limit of 2^31 - 1 for the backward"};
  if (p.batch > 0 && p.heads_kv > 0 && n_blocks > max_ctas / p.batch / p.heads_kv)
    return {
        "k",
        "batch * kv heads * ceil(seqlen_k / 64) exceeds the CUDA grid limit of 2^31 - 1 for the backward"};
  return {};
}

// The problem's rules first (testable in any build), then whether this build has the kernel.
Rejection sm90_backward_rejects(const BackwardParams& b) {
  const AttnParams& p = b.fwd;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return {"q", "head_dim " + str(p.head_dim) + " has no sm90 backward (64, 128 and 256 do)"};
  // A packed varlen tensor's rows are one TMA map (its batch stride is 0).
  const bool packed_q = p.seqs.cu_q != nullptr, packed_k = p.seqs.cu_k != nullptr;
  if ((packed_q ? p.total_q : p.seqlen_q) == 0 || (packed_k ? p.total_k : p.seqlen_k) == 0)
    return {"q", "an empty q or k has no TMA map"};
  const std::array<const char*, 4> names = {"q", "k", "v", "dout"};
  const std::array<const Strides4*, 4> strides = {&p.q_stride, &p.k_stride, &p.v_stride, &b.dout_stride};
  const std::array<bool, 4> packed = {packed_q, packed_k, packed_k, packed_q};
  for (int i = 0; i < 4; ++i)
    if ((!packed[i] && strides[i]->b <= 0) || strides[i]->l <= 0 || strides[i]->h <= 0)
      return {names[i], "a zero stride has no TMA map (the sm90 backward loads it with TMA)"};
#if !defined(TILEATTN_SM90_BACKWARD)
  return {"options.kernel",
          "this build has no sm90 backward (CUDA backward on and sm_90a in the architectures)"};
#else
  return {};
#endif
}

// Preferred wherever it can run: measured (bf16, the backward suites) ahead of the sm80 kernels
// at every shape timed. On an H200 (bench/results/gpu_backward_h200_2026-12-05_c95c5be.txt, and
// 9e5be2f for deterministic mode at 128): dense batches at head dim 128, 1.1-2.3x at 64 and
// 2.1-3.7x at 256; varlen and seqused batches (bwd_seq) 1.6-2.2x at 64 and 128. On an H100
// (gpu_backward_h100_2026-12-05_1457cd4.json): deterministic mode 1.3-2.8x at 64 and 256, dense
// and varlen, and varlen batches at 256 2.7-3.5x; (gpu_backward_h100_2026-12-05_0bcd6ee.json)
// deterministic varlen batches at 128, 1.6-2.0x. Packed and seqused batches run the same kernel
// (launch_bwd's kVarlen: ragged blocks), timed on packed ones.
bool sm90_backward_preferred(const BackwardParams& b) { return sm90_backward_rejects(b).ok(); }

}  // namespace tileattn::detail
