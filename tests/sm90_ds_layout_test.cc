// sm90_ds_layout_test.cc: the sm90 backward's dS store (bwd_layout.h) replayed on the CPU. Each
// thread's stmatrix .x4 .trans (its semantics checked on the device by
// Sm90Blocks.StmatrixTransStoresColumnsAsRows) must put every element of dS^T, key r and query
// c, at dS's swizzled offset of (c, r), and fill the chunk's 64 x 64 elements once each.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/sm90/bwd_layout.h"

namespace tileattn::detail::sm90 {
namespace {

TEST(Sm90DsLayout, StmatrixStoresEveryElementOfDsTransposedOnce) {
  std::vector<int> hits(64 * 64, 0);  // per 16-bit word of the 8 KiB chunk
  for (int warp = 0; warp < 4; ++warp)
    for (int m = 0; m < 4; ++m)
      for (int q = 0; q < 4; ++q)        // register fs[m][q]: elements 8 m + 2 q and + 1
        for (int i = 0; i < 8; ++i)      // memory row i of the matrix, from lane 8 q + i
          for (int k = 0; k < 8; ++k) {  // its 16-bit word k: the matrix's element (row k, column i)
            const int row_addr = ds_stmatrix_offset(m, warp, 8 * q + i);
            const int holder = 4 * k + i / 2, e = 8 * m + 2 * q + i % 2;  // the lane holding it
            const int key = acc_row(e, warp, holder), query = acc_col(e, holder);
            ASSERT_EQ(row_addr % 16, 0);
            ASSERT_EQ(row_addr + 2 * k, ds_offset(query, key))
                << "warp " << warp << " m " << m << " q " << q << " row " << i << " word " << k;
            ++hits[(row_addr + 2 * k) / 2];
          }
  for (int w = 0; w < 64 * 64; ++w) ASSERT_EQ(hits[w], 1) << "word " << w;
}

}  // namespace
}  // namespace tileattn::detail::sm90
