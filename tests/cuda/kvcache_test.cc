// kvcache_test.cc: forward_kvcache on the GPU (on Hopper sm90 for contiguous caches and for pages
// whose gcd with the key block is a multiple of 8, without left padding; sm80 for the rest and on
// other GPUs): the CPU suite's cases (tests/kvcache_case.h) and more, run in checked mode. Each: outputs
// poisoned first, the appended slots within one ulp of the CPU forward_kvcache's on the same inputs, every
// other cache byte unchanged, each sequence's output and LSE against the fp64 oracle on its gathered keys by
// the 2x rule. Bad device-side index values name themselves and write nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvcache_gpu.h"

namespace tileattn::cuda_test {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Pages of 1, 7 (odd), 8, 16, 48 (blocks straddle pages), 64 and 256 positions and a contiguous
// cache, each with four variants:
// a split decode step with rotary; 17 queries over a full cache with a window and no new keys;
// left padding, NeoX rotary over part of the head, forced splits; a packed q and packed new keys
// (one sequence with neither) with softcap, fp32 rotary tables and more splits than key blocks.
std::vector<KvSpec> gpu_specs() {
  std::vector<KvSpec> out;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16})
    for (int64_t page : {0, 1, 7, 8, 16, 48, 64, 256})
      for (int variant = 0; variant < 4; ++variant) {
        KvSpec s;
        s.dtype = dtype, s.page_size = page;
        s.capacity = page >= 64 ? 700 : 300;  // off every tile grid, several pages
        s.seqlens = {10, 0, 257};
        s.hq = 8, s.hkv = 2, s.d = variant % 2 == 0 ? 128 : 64;
        if (variant == 0) {
          s.len_q = 1, s.len_new = 1, s.rotary = true, s.options.causal = true;
        } else if (variant == 1) {
          s.len_q = 17, s.len_new = 0, s.seqlens = {s.capacity, 1, 133}, s.options.window_left = 40;
          s.options.num_splits = 1;
        } else if (variant == 2) {
          s.len_q = 3, s.len_new = 3, s.rotary = true, s.interleaved = false, s.rotary_dim = 32;
          s.leftpad = {3, 0, 50}, s.options.causal = true, s.options.num_splits = 3;
        } else {
          s.lens_q = {1, 17, 5}, s.lens_new = {2, 0, 17}, s.rotary = true, s.rotary_fp32 = true;
          s.options.softcap = 20.0f, s.options.causal = true, s.options.num_splits = 7;
        }
        // Contiguous caches: variant 3 through cache_batch_idx, the others as one tensor. On
        // Hopper variant 2 (left padding) of a paged cache runs on sm80.
        if (page == 0 && variant == 3) s.batch_idx = true;
        out.push_back(s);
      }
  KvSpec gqa;  // 8 query heads on one KV head, NeoX rotary over 24 of 40 dims (padded head dim)
  gqa.dtype = DType::kBFloat16, gqa.hq = 8, gqa.hkv = 1, gqa.d = 40, gqa.rotary = true,
  gqa.interleaved = false;
  gqa.rotary_dim = 24, gqa.page_size = 5, gqa.options.softcap = 10.0f;
  out.push_back(gqa);
  KvSpec d32;  // the CPU suite's default case (head dim 32, padded to 64), paged by 7
  d32.dtype = DType::kFloat16, d32.page_size = 7;
  out.push_back(d32);
  KvSpec stream;  // a long contiguous cache through cache_batch_idx, unsplit: the sm90 kernel's
  stream.dtype = DType::kBFloat16;  // decode config (35 key blocks a CTA: V by the producer's warps)
  stream.capacity = 4500, stream.seqlens = {4400, 1, 4300}, stream.len_q = 1, stream.len_new = 1;
  stream.hq = 8, stream.hkv = 2, stream.d = 128, stream.rotary = true, stream.options.causal = true;
  stream.batch_idx = true, stream.options.num_splits = 1;
  out.push_back(stream);
  for (int64_t page : {16, 64}) {  // the same paged: K and V by TMA boxes, a box a page
    KvSpec paged = stream;
    paged.batch_idx = false, paged.page_size = page;
    out.push_back(paged);
  }
  KvSpec wide;  // head dim 256, a long cache, decoding with the split heuristic
  wide.dtype = DType::kBFloat16, wide.d = 256, wide.hq = 4, wide.hkv = 4, wide.capacity = 2100;
  wide.page_size = 16, wide.seqlens = {2047, 1, 1000}, wide.len_q = 2, wide.len_new = 2;
  wide.options.causal = true;
  out.push_back(wide);
  KvSpec wide64 = wide;  // pages of 64 in D = 256's blocks of 80: boxes of 16
  wide64.page_size = 64, wide64.seqlens = {1500, 77, 0};
  out.push_back(wide64);
  return out;
}

class KvCacheCuda : public testing::TestWithParam<KvSpec> {};

TEST_P(KvCacheCuda, AppendsInPlaceAndMatchesTheOracle) {
  SKIP_WITHOUT_GPU();
  test::check_kvcache(GetParam(), DeviceKind::kCUDA, run_kvcache_gpu);
}

INSTANTIATE_TEST_SUITE_P(Cases, KvCacheCuda, testing::ValuesIn(gpu_specs()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

// A bad index value on the device: the checked mode names it, and neither the cache nor out is
// written.
void expect_rejected(KvCase& kc, const std::string& argument, const std::string& text) {
  const HostTensor k_before = kc.k_cache, v_before = kc.v_cache;
  Result r = kc.fresh_outputs();
  try {
    const GpuKvCase gpu(kc);
    const DeviceCopy out(r.out);
    Options o = kc.s.options;
    o.check_indices = true;
    try {
      forward_kvcache(gpu.q(), gpu.args(), out.ref(), nullptr, o);
      ADD_FAILURE() << "accepted: " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    out.to_host(r.out);
    gpu.caches_to_host(kc);
  } catch (const std::exception& e) {
    ADD_FAILURE() << argument << ": " << e.what();
  }
  EXPECT_TRUE(kc.k_cache.bytes() == k_before.bytes()) << argument << ": k_cache was written";
  EXPECT_TRUE(kc.v_cache.bytes() == v_before.bytes()) << argument << ": v_cache was written";
  EXPECT_EQ(r.out.count_unwritten(), r.out.numel()) << argument << ": out was written";
}

KvSpec bad_base(int64_t page) {
  KvSpec s;
  s.dtype = DType::kBFloat16, s.page_size = page, s.d = 64, s.rotary = true, s.len_new = 2;
  s.batch_idx = page == 0;
  return s;
}

TEST(KvCacheCuda, CheckedModeNamesTheBadIndexAndWritesNothing) {
  SKIP_WITHOUT_GPU();
  {
    KvCase kc(bad_base(8));
    kc.table.set({2, 3, 0, 0}, 1000);  // a page that does not exist (sequence 2 uses pages 0..7)
    expect_rejected(kc, "page_table", "entry [2, 3] is 1000");
  }
  {
    KvCase kc(bad_base(8));
    kc.seqlens.set({1, 0, 0, 0}, -1);
    expect_rejected(kc, "cache_seqlens", "entry 1 is -1");
  }
  {
    KvCase kc(bad_base(8));
    kc.seqlens.set({2, 0, 0, 0}, 79);  // 79 cached + 2 new > capacity 80
    expect_rejected(kc, "k_new", "past the cache's capacity of 80");
  }
  {
    KvCase kc(bad_base(0));
    kc.batch_idx.set({1, 0, 0, 0}, 5);  // the cache has batch + 2 = 5 rows
    expect_rejected(kc, "cache_batch_idx", "entry 1 is 5");
  }
  {
    KvSpec s = bad_base(0);
    s.leftpad = {0, 0, 0};
    KvCase kc(s);
    kc.leftpad.set({0, 0, 0, 0}, 11);  // past cache_seqlens[0] = 10
    expect_rejected(kc, "cache_leftpad", "entry 0 is 11");
  }
  {
    KvSpec s = bad_base(16);
    s.lens_new = {1, 2, 1};
    KvCase kc(s);
    kc.cu_new.set({2, 0, 0, 0}, 0);  // {0, 1, 0, 4}: decreases
    expect_rejected(kc, "cu_seqlens_k_new", "entry 2 is 0");
  }
}

// What the host can see is rejected before any device work: no cache_seqlens with new keys.
TEST(KvCacheCuda, HostChecksNameTheArgument) {
  SKIP_WITHOUT_GPU();
  KvCase kc(bad_base(0));
  const GpuKvCase gpu(kc);
  HostTensor out = kc.fresh_outputs().out;
  const DeviceCopy d_out(out);
  KvCache c = gpu.args();
  c.cache_seqlens = nullptr;
  try {
    forward_kvcache(gpu.q(), c, d_out.ref(), nullptr, {});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "cache_seqlens") << e.what();
  }
}

// A decode step (paged, rotary, split) captured in a CUDA graph with cache_seqlens on the device,
// replayed after changing them there: caches, out and lse equal an uncaptured call's, bit for bit.
void graph_replay_matches_plain_calls(int64_t page_size) {
  KvSpec s;
  s.dtype = DType::kBFloat16, s.page_size = page_size, s.d = 128, s.hq = 8, s.hkv = 2, s.capacity = 512;
  s.seqlens = {100, 0, 300}, s.rotary = true, s.options.causal = true;
  KvCase kc(s);
  const GpuKvCase gpu(kc);
  Result graphed = kc.fresh_outputs(), plain = kc.fresh_outputs();
  const Result poisoned = kc.fresh_outputs();
  const DeviceCopy out(graphed.out), lse(graphed.lse);
  const TensorRef lse_ref = lse.ref();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Options o = s.options;
  o.cuda_stream = stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  forward_kvcache(gpu.q(), gpu.args(), out.ref(), &lse_ref, o);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const HostTensor k_initial = kc.k_cache, v_initial = kc.v_cache;
  for (const std::vector<int64_t>& lens : {std::vector<int64_t>{100, 0, 300}, {7, 511, 0}, {257, 33, 1}}) {
    for (size_t b = 0; b < lens.size(); ++b) kc.seqlens.set({static_cast<int64_t>(b), 0, 0, 0}, lens[b]);
    kc.k_cache = k_initial, kc.v_cache = v_initial;
    gpu.from_host();                   // the caches as they were, the new lengths
    const auto poison_outputs = [&] {  // each run starts from NaN: nothing unwritten can pass
      graphed.out = poisoned.out, graphed.lse = poisoned.lse;
      out.from_host(), lse.from_host();
    };
    poison_outputs();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    out.to_host(graphed.out), lse.to_host(graphed.lse);
    const Result got = graphed;  // graphed's storage is poisoned again for the plain call
    gpu.caches_to_host(kc);
    const HostTensor k_graphed = kc.k_cache, v_graphed = kc.v_cache;
    kc.k_cache = k_initial, kc.v_cache = v_initial;
    gpu.from_host();
    EXPECT_EQ(got.out.count_unwritten(), 0);
    EXPECT_EQ(got.lse.count_unwritten(), 0);
    poison_outputs();
    forward_kvcache(gpu.q(), gpu.args(), out.ref(), &lse_ref, o);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    out.to_host(plain.out), lse.to_host(plain.lse);
    gpu.caches_to_host(kc);
    EXPECT_TRUE(test::same_bits(got, plain)) << "lengths " << lens[0] << ", " << lens[1] << ", " << lens[2];
    EXPECT_TRUE(k_graphed.bytes() == kc.k_cache.bytes() && v_graphed.bytes() == kc.v_cache.bytes());
    EXPECT_EQ(plain.out.count_unwritten(), 0);
    EXPECT_EQ(plain.lse.count_unwritten(), 0);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(KvCacheCuda, DecodeStepCapturedInAGraph) {
  SKIP_WITHOUT_GPU();
  graph_replay_matches_plain_calls(16);  // paged: the sm90 kernel on Hopper
  graph_replay_matches_plain_calls(5);   // paged by 5: the sm80 kernel
}

// On Hopper the sm90 kernel takes every paged cache when forced (so a quiet fall back to sm80
// would fail): TMA boxes for pages of 8, 16 and 48, and cp.async gathers (which auto selection
// does not choose yet) for pages of 1, 5 and 7 and for left padding, at D = 64, 128 and 256.
TEST(KvCacheCuda, Sm90TakesPagedCachesOnHopper) {
  SKIP_WITHOUT_GPU();
  if (!sm90_available()) GTEST_SKIP() << "no sm90 kernel on this GPU";
  for (int64_t page : {8, 16, 48, 1, 5, 7})
    for (bool leftpad : {false, true}) {
      KvSpec s;
      // Gathers at every head dim: odd pages at D = 64 and (left-padded) 256, even pages with
      // left padding at 128.
      s.dtype = DType::kBFloat16, s.page_size = page, s.d = page % 2 ? (leftpad ? 256 : 64) : 128;
      s.hq = 8, s.hkv = 2;
      s.capacity = 400, s.seqlens = {130, 0, 383}, s.rotary = true, s.options.causal = true;
      if (leftpad) s.leftpad = {3, 0, 50}, s.len_q = 3, s.len_new = 3, s.options.num_splits = 3;
      s.options.kernel = Kernel::kCudaSm90;
      SCOPED_TRACE(s.name());
      test::check_kvcache(s, DeviceKind::kCUDA, run_kvcache_gpu);
    }
}

TEST(KvCacheCuda, ContiguousDecodeStepCapturedInAGraph) {
  SKIP_WITHOUT_GPU();
  graph_replay_matches_plain_calls(0);  // one tensor: the sm90 kernel on Hopper
}

}  // namespace
}  // namespace tileattn::cuda_test
