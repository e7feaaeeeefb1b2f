// forward_test.cc: the sm80 kernel against the fp64 oracle, over the CPU sweep's shapes: ragged
// lengths on both sides, Lq < Lk and Lq > Lk, GQA/MQA, causal, windows, softcap, both dtypes,
// strided views, every head dim (compiled and padded). Rule: err <= 2 err(eager) + atol.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cuda_case.h"

namespace tileattn::cuda_test {
namespace {

bool supported_here(const Problem& p) { return p.head_dim % 8 == 0 && p.head_dim <= 256; }

// Whether the sm90 kernel would take p: an sm_90 GPU, a build with it, a head dim it has.
bool sm90_selectable(const Problem& p) {
  return sm90_available() && p.seqlen_q > 0 && p.seqlen_k > 0 &&
         (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256);
}

class Forward : public ::testing::TestWithParam<Problem> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// The kernel selection picks (sm90 on an H100/H200 for the head dims it has), and the sm80
// kernel on the same problem wherever selection picked another: it stays the fallback.
TEST_P(Forward, MatchesOracle) {
  const Problem& p = GetParam();
  ASSERT_TRUE(supported_here(p)) << p.name();
  const Report r = run_case(p);
  EXPECT_TRUE(r.ok()) << p.name() << ": " << r.str();
  if (p.options.kernel != Kernel::kAuto || !sm90_selectable(p)) return;
  Problem sm80 = p;
  sm80.options.kernel = Kernel::kCudaSm80;
  const Report r80 = run_case(sm80);
  EXPECT_TRUE(r80.ok()) << p.name() << " (sm80): " << r80.str();
}

Problem base(int64_t lq, int64_t lk, int64_t d, DType dtype = DType::kBFloat16) {
  Problem p;
  p.seqlen_q = lq;
  p.seqlen_k = lk;
  p.head_dim = d;
  p.dtype = dtype;
  p.heads_q = 2;
  p.heads_kv = 1;
  return p;
}

const std::vector<int64_t> kLengths = {1, 17, 63, 64, 65, 113, 203, 1023, 1025};

// Every (Lq, Lk) pair of the CPU sweep, with and without the causal mask.
std::vector<Problem> length_grid() {
  std::vector<Problem> out;
  for (int64_t lq : kLengths)
    for (int64_t lk : kLengths)
      for (bool causal : {false, true}) {
        Problem p = base(lq, lk, 64);
        p.options.causal = causal;
        out.push_back(p);
      }
  return out;
}

// Every head dim class (compiled: 64, 96, 128, 256; padded: 8, 40, 72, 136, 200) x dtype x mask.
std::vector<Problem> head_dims() {
  std::vector<Problem> out;
  const std::pair<int64_t, int64_t> lengths[] = {{17, 203}, {203, 17}, {113, 1025}};
  for (int64_t d : {8, 40, 64, 72, 96, 128, 136, 200, 256})
    for (DType dtype : {DType::kBFloat16, DType::kFloat16})
      for (int variant = 0; variant < 4; ++variant)
        for (auto [lq, lk] : lengths) {
          Problem p = base(lq, lk, d, dtype);
          if (variant == 1) p.options.causal = true;
          if (variant == 2) p.options.window_left = 32, p.options.window_right = 8;
          if (variant == 3) p.options.softcap = 30.0f, p.input_stddev = 2.5;
          out.push_back(p);
        }
  return out;
}

std::vector<Problem> gqa() {
  std::vector<Problem> out;
  for (int64_t hkv : {1, 2, 8})
    for (bool causal : {false, true}) {
      Problem p = base(65, 130, 128);
      p.batch = 2;
      p.heads_q = 8;
      p.heads_kv = hkv;
      p.options.causal = causal;
      out.push_back(p);
    }
  return out;
}

// Windows of every shape, on both sides of Lq = Lk (rows that see no key included).
std::vector<Problem> windows() {
  std::vector<Problem> out;
  const std::pair<int64_t, int64_t> wins[] = {{0, 0},   {16, -1}, {-1, 16},  {32, 8},
                                              {100, 0}, {5, 200}, {300, 300}};
  const std::pair<int64_t, int64_t> lengths[] = {{63, 203}, {203, 63}, {1023, 1025}, {1025, 300}};
  for (auto [l, r] : wins)
    for (auto [lq, lk] : lengths) {
      Problem p = base(lq, lk, 64);
      p.options.window_left = l;
      p.options.window_right = r;
      out.push_back(p);
    }
  for (auto [lq, lk] : lengths) {  // causal combined with a left window
    Problem p = base(lq, lk, 128, DType::kFloat16);
    p.options.causal = true;
    p.options.window_left = 64;
    out.push_back(p);
  }
  return out;
}

std::vector<Problem> layouts() {
  std::vector<Problem> out;
  const Layout all[] = {Layout::kContiguous, Layout::kBHLD, Layout::kAligned};
  int n = 0;
  for (Layout ql : all)
    for (Layout kvl : all)
      for (Layout ol : {Layout::kBHLD, Layout::kAligned}) {
        Problem p = base(113, 203,
                         (n % 3 == 0)   ? 72
                         : (n % 3 == 1) ? 128
                                        : 64,
                         n % 2 ? DType::kFloat16 : DType::kBFloat16);
        p.batch = 2;
        p.heads_q = 4;
        p.heads_kv = 2;
        p.options.causal = n % 2 == 0;
        p.q_layout = ql;
        p.kv_layout = kvl;
        p.out_layout = ol;
        p.lse_layout = n % 3 == 0   ? LseLayout::kBLH
                       : n % 3 == 1 ? LseLayout::kPadded
                                    : LseLayout::kContiguous;
        out.push_back(p);
        ++n;
      }
  return out;
}

// Options that change the arithmetic: textbook rescaling, negative and zero scales, no LSE, a
// user stream, a softmax so peaked that the running max jumps often.
std::vector<Problem> options() {
  std::vector<Problem> out;
  for (int64_t d : {64, 128, 256}) {
    Problem p = base(203, 1025, d);
    p.options.rescale = Rescale::kAlways;
    out.push_back(p);
    p = base(203, 1025, d, DType::kFloat16);
    p.options.scale = -0.1f;
    out.push_back(p);
    p = base(65, 203, d);
    p.options.scale = 0.0f;
    p.options.causal = true;
    out.push_back(p);
    p = base(203, 113, d);
    p.with_lse = false;
    p.options.causal = true;
    out.push_back(p);
    p = base(1023, 1023, d);
    p.input_stddev = 3.0;  // logits spread over ~100 units: many base moves, conditional and not
    out.push_back(p);
    p.options.rescale = Rescale::kAlways;
    out.push_back(p);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Lengths, Forward, ::testing::ValuesIn(length_grid()),
                         [](const auto& info) { return info.param.test_name(); });
INSTANTIATE_TEST_SUITE_P(HeadDims, Forward, ::testing::ValuesIn(head_dims()),
                         [](const auto& info) { return info.param.test_name(); });
INSTANTIATE_TEST_SUITE_P(Gqa, Forward, ::testing::ValuesIn(gqa()),
                         [](const auto& info) { return info.param.test_name(); });
INSTANTIATE_TEST_SUITE_P(Windows, Forward, ::testing::ValuesIn(windows()),
                         [](const auto& info) { return info.param.test_name(); });
INSTANTIATE_TEST_SUITE_P(Layouts, Forward, ::testing::ValuesIn(layouts()), [](const auto& info) {
  return info.param.test_name() + "_" + std::to_string(info.index);
});
INSTANTIATE_TEST_SUITE_P(Options, Forward, ::testing::ValuesIn(options()), [](const auto& info) {
  return info.param.test_name() + "_" + std::to_string(info.index);
});

TEST(ForwardCuda, UserStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Problem p = base(1025, 1023, 128);
  p.options.causal = true;
  p.options.cuda_stream = stream;
  const Report r = run_case(p);
  EXPECT_TRUE(r.ok()) << r.str();
  cudaStreamDestroy(stream);
}

// Captured into a CUDA graph (as decoding loops run) on a fresh stream and replayed twice: the
// persistent sm90 kernel (D 64 and 128) takes its tile counter from the graph, zeroed per replay.
TEST(ForwardCuda, CapturedInAGraph) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto graphed = [](const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                          const TensorRef* lse, const Options& o) {
    const auto stream = static_cast<cudaStream_t>(o.cuda_stream);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    forward(q, k, v, out, lse, o);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  };
  for (int64_t d : {64, 128, 256}) {
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    Problem p = base(700, 900, d);
    p.heads_q = 8, p.heads_kv = 2, p.batch = 6;  // more tiles than SMs
    p.options.causal = true;
    p.options.cuda_stream = stream;
    const Report r = run_case(p, 1, -1, graphed);
    EXPECT_TRUE(r.ok()) << "D " << d << ": " << r.str();
    cudaStreamDestroy(stream);
  }
}

// Host threads enqueueing on one stream (the legacy default stream, which all threads share):
// the persistent sm90 kernel's tile counter must start every launch at zero, whichever thread
// enqueued it (more tiles than SMs, so a counter left high would skip tiles).
TEST(ForwardCuda, HostThreadsShareTheDefaultStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 3; ++i) {
        Problem p = base(600 + 37 * t, 300, t % 2 ? 64 : 128);
        p.heads_q = 8, p.heads_kv = 2, p.batch = 4;
        const Report r = run_case(p, 1 + i);
        EXPECT_TRUE(r.ok()) << "thread " << t << " run " << i << ": " << r.str();
      }
    });
  for (std::thread& th : threads) th.join();
}

TEST(ForwardCuda, NanInKeyReachesOnlyRowsThatSeeIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Problem p = base(203, 203, 64);
  p.heads_q = 1;
  p.options.causal = true;  // rows before key 150 do not see it and must stay finite
  const Report r = run_case(p, 1, 150);
  EXPECT_TRUE(r.ok()) << r.str();
}

TEST(ForwardCuda, NoKeysGivesZeroAndMinusInf) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Problem p = base(77, 64, 64);
  p.options.window_left = 0;
  p.options.window_right = 0;  // rows i < 13 sit before the first key: empty
  const Report r = run_case(p);
  EXPECT_TRUE(r.ok()) << r.str();
}

TEST(ForwardCuda, Selection) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4 << 20), cudaSuccess);
  auto ref = [&](int slot, int64_t h, int64_t dim) {  // four disjoint 1 MiB slots
    return TensorRef::contiguous(static_cast<char*>(d) + (slot << 20), DType::kBFloat16, {1, 64, h, dim},
                                 Device::cuda(0));
  };
  // Auto picks sm90 wherever it is selectable (an sm_90 GPU, a build with it), else sm80.
  Options sm90;
  sm90.kernel = Kernel::kCudaSm90;
  const bool hopper = supported(ref(0, 2, 64), ref(1, 1, 64), ref(2, 1, 64), ref(3, 2, 64), nullptr, sm90).ok;
  Support s = supported(ref(0, 2, 64), ref(1, 1, 64), ref(2, 1, 64), ref(3, 2, 64), nullptr);
  EXPECT_TRUE(s.ok) << s.reason;
  EXPECT_EQ(s.kernel, hopper ? Kernel::kCudaSm90 : Kernel::kCudaSm80);
  s = supported(ref(0, 2, 72), ref(1, 1, 72), ref(2, 1, 72), ref(3, 2, 72), nullptr);  // sm80 pads 72
  EXPECT_TRUE(s.ok) << s.reason;
  EXPECT_EQ(s.kernel, Kernel::kCudaSm80);
  s = supported(ref(0, 2, 264), ref(1, 1, 264), ref(2, 1, 264), ref(3, 2, 264), nullptr);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("head_dim"), std::string::npos) << s.reason;
  cudaFree(d);
}

// The tests forced onto the sm90 kernels skip where sm90_available() is false; on a Hopper with
// those kernels built it must be true, or they would pass by skipping.
TEST(ForwardCuda, Sm90TestsRunOnHopper) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
#if defined(TILEATTN_TEST_SM90_BUILT)
  const bool expected = prop.major == 9 && prop.minor == 0;
#else
  const bool expected = false;
#endif
  EXPECT_EQ(sm90_available(), expected) << sm90_unavailable_reason();
}

}  // namespace
}  // namespace tileattn::cuda_test
