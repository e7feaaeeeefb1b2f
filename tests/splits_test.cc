// splits_test.cc: the split-KV count heuristics (dispatch/splits.h).
#include "dispatch/splits.h"

#include <gtest/gtest.h>

namespace tileattn::detail {
namespace {

TEST(CudaSplits, OneWhileTheTilesFillTheSms) {
  EXPECT_EQ(cuda_num_splits(106, 132, 1000, 256), 1);  // >= 80% of 132 SMs
  EXPECT_EQ(cuda_num_splits(5000, 132, 1000, 256), 1);
  EXPECT_EQ(cuda_num_splits(0, 132, 1000, 256), 1);
}

TEST(CudaSplits, DecodingFillsTheSms) {
  EXPECT_EQ(cuda_num_splits(8, 132, 1024, 256), 16);   // 128 CTAs of 132
  EXPECT_EQ(cuda_num_splits(64, 132, 128, 256), 2);    // 128 CTAs
  EXPECT_EQ(cuda_num_splits(1, 132, 1024, 256), 126);  // the fewest within 5% of a full wave
}

TEST(CudaSplits, KeepTwoBlocksASplitAndTheCap) {
  EXPECT_EQ(cuda_num_splits(8, 132, 6, 256), 3);  // 3 splits of 2 blocks
  EXPECT_EQ(cuda_num_splits(8, 132, 1, 256), 1);
  EXPECT_LE(cuda_num_splits(1, 132, 100000, 40), 40);
}

TEST(CpuSplits, OnlyFewItemsSplitAndNeverByThreads) {
  EXPECT_EQ(cpu_num_splits(64, 1000, 256), 1);
  EXPECT_EQ(cpu_num_splits(32, 1000, 256), 2);
  EXPECT_EQ(cpu_num_splits(1, 1000, 256), 64);
  EXPECT_EQ(cpu_num_splits(1, 12, 256), 3);  // >= 4 blocks a split
  EXPECT_EQ(cpu_num_splits(1, 3, 256), 1);
}

TEST(CpuSplits, DecodingSplitsKeysToSixteenItemsOfAtLeast512Keys) {
  EXPECT_EQ(cpu_decode_splits(8, 8192, 256), 2);
  EXPECT_EQ(cpu_decode_splits(1, 8192, 256), 16);
  EXPECT_EQ(cpu_decode_splits(1, 2047, 256), 3);  // >= 512 keys a split
  EXPECT_EQ(cpu_decode_splits(1, 300, 256), 1);
  EXPECT_EQ(cpu_decode_splits(16, 100000, 256), 1);
  EXPECT_EQ(cpu_decode_splits(1, 1 << 20, 8), 8);
}

}  // namespace
}  // namespace tileattn::detail
