// select_test.cc: kernel selection as the pure function it is (dispatch/select.h), on the
// capabilities of a Hopper and an Ampere GPU that this machine need not have: which kernel runs
// a KV cache (paged with the page sizes sm90's boxes fit, left padding, cache_batch_idx), what a
// forced sm90 takes, and what the sm90 backward turns down.
#include "dispatch/select.h"

#include <gtest/gtest.h>

#include <string>

namespace tileattn::detail {
namespace {

DeviceCaps gpu(int major, int minor) {
  DeviceCaps c;
  c.kind = DeviceKind::kCUDA, c.cuda_built = true, c.device_count = 1;
  c.cc_major = major, c.cc_minor = minor, c.sm90_built = true;
  return c;
}

// A decode step's problem on bf16 [B, L, H, D] tensors (addresses only: nothing is read).
AttnParams decode(int64_t head_dim) {
  AttnParams p;
  p.q = p.k = p.v = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  p.out = reinterpret_cast<void*>(uintptr_t{2} << 20);
  p.dtype = p.out_dtype = DType::kBFloat16;
  p.batch = 4, p.seqlen_q = 1, p.seqlen_k = 4096, p.heads_q = 32, p.heads_kv = 8, p.head_dim = head_dim;
  const Strides4 q{32 * head_dim, 32 * head_dim, head_dim, 1},
      kv{4096 * 8 * head_dim, 8 * head_dim, head_dim, 1};
  p.q_stride = p.out_stride = q;
  p.k_stride = p.v_stride = kv;
  p.scale = 0.1f;
  return p;
}

AttnParams paged(int64_t head_dim, int64_t page_size) {
  static const int32_t table[1] = {0};
  AttnParams p = decode(head_dim);
  p.page_table = table, p.page_size = page_size, p.page_table_stride = 4096 / page_size + 1;
  p.k_stride.b = p.v_stride.b = page_size * 8 * head_dim;  // the page stride
  p.cache_rows = 1000;
  return p;
}

Kernel chosen(const AttnParams& p, const DeviceCaps& caps = gpu(9, 0)) {
  const Selection s = select_kernel(p, caps, Kernel::kAuto);
  EXPECT_TRUE(s.ok()) << s.argument << ": " << s.reason;
  return s.kernel;
}

TEST(Select, PagedCachesWhoseBoxesFitRunOnSm90) {
  for (int64_t page : {8, 16, 32, 48, 64, 128, 256, 1024})
    EXPECT_EQ(chosen(paged(128, page)), Kernel::kCudaSm90) << page;
  for (int64_t page : {8, 16, 24, 64, 80, 160})
    EXPECT_EQ(chosen(paged(256, page)), Kernel::kCudaSm90) << page;
  EXPECT_EQ(chosen(paged(64, 16)), Kernel::kCudaSm90);
}

TEST(Select, OtherPagedCachesRunOnSm80) {
  for (int64_t page : {1, 5, 7, 12, 20, 100}) EXPECT_EQ(chosen(paged(128, page)), Kernel::kCudaSm80) << page;
  for (int64_t page : {4, 12, 20, 100}) EXPECT_EQ(chosen(paged(256, page)), Kernel::kCudaSm80) << page;
}

TEST(Select, LeftPaddingKeepsAPagedCacheOnSm80) {
  static const int32_t leftpad[4] = {0, 1, 2, 3};
  AttnParams p = paged(128, 16);
  p.seqs.start_k = leftpad;
  EXPECT_EQ(chosen(p), Kernel::kCudaSm80);
  AttnParams contiguous = decode(128);  // a contiguous cache takes left padding on sm90
  contiguous.seqs.start_k = leftpad;
  EXPECT_EQ(chosen(contiguous), Kernel::kCudaSm90);
}

TEST(Select, CacheBatchIndexRunsOnSm90) {
  static const int32_t rows[4] = {3, 1, 0, 2};
  AttnParams p = decode(128);
  p.kv_batch_idx = rows, p.cache_rows = 8;
  EXPECT_EQ(chosen(p), Kernel::kCudaSm90);
}

TEST(Select, AmpereRunsEveryCacheOnSm80) {
  EXPECT_EQ(chosen(paged(128, 16), gpu(8, 0)), Kernel::kCudaSm80);
  EXPECT_EQ(chosen(decode(128), gpu(8, 6)), Kernel::kCudaSm80);
}

TEST(Select, ForcedSm90TakesEveryPagedCache) {  // cp.async gathers where boxes do not fit
  static const int32_t leftpad[4] = {0, 1, 2, 3};
  AttnParams padded = paged(128, 16);
  padded.seqs.start_k = leftpad;
  for (const AttnParams& p : {paged(128, 7), paged(64, 1), paged(256, 20), padded}) {
    EXPECT_TRUE(sm90_gathers(p));
    const Selection s = select_kernel(p, gpu(9, 0), Kernel::kCudaSm90);
    EXPECT_EQ(s.kernel, Kernel::kCudaSm90) << s.argument << ": " << s.reason;
  }
  EXPECT_FALSE(sm90_gathers(paged(128, 16)));
  EXPECT_FALSE(sm90_gathers(decode(128)));
}

BackwardParams backward_of(const AttnParams& p) {
  BackwardParams b;
  b.fwd = p;
  b.dout = p.q, b.dq = b.dk = b.dv = p.out;
  b.dout_stride = b.dq_stride = p.q_stride, b.dk_stride = b.dv_stride = p.k_stride;
  b.kernel = Kernel::kCudaSm90;
  return b;
}

TEST(Select, Sm90BackwardTurnsDownWhatItHasNoKernelFor) {
  AttnParams p = decode(96);
  p.seqlen_q = 512, p.seqlen_k = 512;
  Rejection r = sm90_backward_rejects(backward_of(p));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.reason.find("96"), std::string::npos) << r.reason;
  // A dense problem of a head dim it has: taken where the build has the kernel; a CPU-only or
  // sm80-only build says it has none.
  r = sm90_backward_rejects(backward_of(decode(128)));
  EXPECT_TRUE(r.ok() || r.argument == "options.kernel") << r.argument << ": " << r.reason;
  // Seqused and packed varlen batches alike (a packed tensor's batch stride is 0), but not a
  // packed q without rows (no TMA map).
  static const int32_t used[4] = {1, 2, 3, 4}, cu[5] = {0, 1, 3, 6, 10};
  p = decode(128);
  p.seqs.used_k = used;
  r = sm90_backward_rejects(backward_of(p));
  EXPECT_TRUE(r.ok() || r.argument == "options.kernel") << r.argument << ": " << r.reason;
  p.seqs.cu_q = cu, p.total_q = 10, p.q_stride.b = 0;
  r = sm90_backward_rejects(backward_of(p));
  EXPECT_TRUE(r.ok() || r.argument == "options.kernel") << r.argument << ": " << r.reason;
  p.total_q = 0;
  r = sm90_backward_rejects(backward_of(p));
  EXPECT_EQ(r.argument, "q");
  EXPECT_NE(r.reason.find("no TMA map"), std::string::npos) << r.reason;
  p.seqs.cu_q = nullptr, p.total_q = 0;  // a dense q whose batch stride is 0
  r = sm90_backward_rejects(backward_of(p));
  EXPECT_EQ(r.argument, "q");
  EXPECT_NE(r.reason.find("zero stride"), std::string::npos) << r.reason;
}

// The default's choice: the sm90 backward wherever it can run (measured ahead of the sm80 kernels
// at every shape timed, cuda_limits.cc): head dims 64, 128 and 256, dense, seqused or packed,
// deterministic or not, the same answer as sm90_backward_rejects; never at other head dims.
TEST(Select, Sm90BackwardPreferredWhereverItRuns) {
  AttnParams p = decode(64);
  p.seqlen_q = 1024, p.seqlen_k = 1024;
  static const int32_t used[4] = {1, 2, 3, 4};
  static const int32_t cu[5] = {0, 1, 3, 6, 10};
  for (int d : {64, 96, 128, 256})
    for (int kind : {0, 1, 2}) {  // dense, seqused, packed k
      BackwardParams b = backward_of(p);
      b.fwd.head_dim = d, b.fwd.window_right = kind == 1 ? 0 : -1;
      if (kind == 1) b.fwd.seqs.used_q = used;
      if (kind == 2) b.fwd.seqs.cu_k = cu, b.fwd.total_k = 10;
      const bool preferred = sm90_backward_preferred(b);
      EXPECT_EQ(preferred, sm90_backward_rejects(b).ok()) << d << " " << kind;
      if (d == 96) {
        EXPECT_FALSE(preferred) << kind;
      }
      b.deterministic = true;
      EXPECT_EQ(sm90_backward_preferred(b), preferred) << d << " " << kind << " deterministic";
    }
}

}  // namespace
}  // namespace tileattn::detail
