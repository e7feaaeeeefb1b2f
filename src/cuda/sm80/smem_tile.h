// smem_tile.h: the swizzled shared-memory tile layout, its cp.async loader, and the per-lane
// ldmatrix addressing that walks it.
//
// A tile is rows of kRowBytes (a multiple of 128) holding 16-byte chunks of 8 elements; chunk c
// of row r is stored in slot c ^ (r % 8) of its group of 8. An ldmatrix reads one chunk column
// of 8 consecutive rows and 8 consecutive cp.async threads write 8 chunks of one row: either way
// the 8 slots differ, so the accesses cover all 32 banks once (no conflicts).
// Tiles start on 128-byte boundaries: the XOR then only ever touches address bits 4..6.
#pragma once

#include <cstdint>

#include "cuda/sm80/ptx.h"

namespace tileattn::detail::sm80 {

template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  static_assert(kRowBytes % 128 == 0, "rows must hold whole groups of 8 chunks");
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// A lane's ldmatrix offset for chunk lane_chunk + two_k, given lane_off: its offset of chunk
// lane_chunk (0 or 1) in a row r of a tile, relative to the tile start. (lane_chunk + two_k) ^
// (r % 8) equals (lane_chunk ^ (r % 8)) ^ two_k because two_k is even, so stepping along a row
// is one XOR of the low 3 bits of two_k plus a whole-group offset. With two_k a compile-time
// constant that leaves 4 distinct XORed offsets per lane; whole rows (multiples of 128 bytes)
// and the tile base are added afterwards, where they fold into the instruction's immediate.
__device__ __forceinline__ uint32_t chunk_step(uint32_t lane_off, int two_k) {
  return (lane_off ^ static_cast<uint32_t>((two_k & 7) << 4)) + static_cast<uint32_t>((two_k >> 3) << 7);
}

// Copies a [kRows, kRowBytes / 16 chunks] tile from a strided [rows, D] slice: row r is read from
// src + r * row_stride. Rows >= valid_rows and chunks >= valid_chunks are zero-filled (the
// ragged end of a sequence, a padded head dim) without being read.
// Each thread owns one chunk column c and rows r0, r0 + kRowStep, ...: kRowStep is a multiple of
// 8, so all its shared-memory slots are one offset plus immediates, and its global address
// advances by one 64-bit add per row. The empty asm makes that add opaque, so the compiler does
// not hoist every row's 64-bit address out of the mainloop (32 registers at D = 128).
template <int kRows, int kRowBytes, int kThreads, class T>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const T* src, int64_t row_stride,
                                                int valid_rows, int valid_chunks, int tid) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "each thread keeps one chunk column and one swizzle phase");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const bool chunk_ok = c < valid_chunks;
  const uint32_t s_off = tile + swizzled<kRowBytes>(r0, c);
  const T* g = src + (chunk_ok ? r0 * row_stride + c * 8 : 0);
  const int64_t g_step = chunk_ok ? kRowStep * row_stride : 0;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool valid = chunk_ok && r0 + i * kRowStep < valid_rows;
    // An invalid copy reads nothing; its address still points into the slice.
    cp_async_16(s_off + i * kRowStep * kRowBytes, valid ? g : src, valid);
    g += g_step;
    asm volatile("" : "+l"(g));
  }
}

// A paged KV cache's rows of one head: position pos is slot pos % page_size of page
// pages[pos / page_size] (positions are below 2^30, so 32-bit division does).
template <class T>
struct PagedRows {
  const T* head;  // element 0 of page 0 for this KV head
  int64_t page_stride, slot_stride;
  const int32_t* pages;  // this sequence's row of the page table
  int page_size;

  __device__ __forceinline__ const T* row(int pos) const {
    return head + int64_t{pages[pos / page_size]} * page_stride + int64_t{pos % page_size} * slot_stride;
  }
};

// load_tile_async for rows that do not lie at one stride: row r of the tile is position pos0 + r
// of a paged cache. Same thread mapping, swizzle and zero fill; each valid row reads its page
// table entry (the entries past valid_rows are never read: a sequence's last page may be its
// table's last).
template <int kRows, int kRowBytes, int kThreads, class T>
__device__ __forceinline__ void load_tile_paged(uint32_t tile, const PagedRows<T>& src, int pos0,
                                                int valid_rows, int valid_chunks, int tid) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "each thread keeps one chunk column and one swizzle phase");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const bool chunk_ok = c < valid_chunks;
  const uint32_t s_off = tile + swizzled<kRowBytes>(r0, c);
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const int r = r0 + i * kRowStep;
    const bool valid = chunk_ok && r < valid_rows;
    cp_async_16(s_off + i * kRowStep * kRowBytes, valid ? src.row(pos0 + r) + c * 8 : src.head, valid);
  }
}

}  // namespace tileattn::detail::sm80
