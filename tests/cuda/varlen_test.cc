// varlen_test.cc: varlen batches, seqused and split-KV on the GPU (the kernel selection picks,
// and the sm80 kernel forced), each sequence against the fp64 oracle; the checked mode; the
// combine kernel; a split decode step captured in a CUDA graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_case.h"

namespace tileattn::cuda_test {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

Problem base(int64_t d, DType dtype, int64_t hq, int64_t hkv) {
  Problem p;
  p.head_dim = d, p.dtype = dtype, p.heads_q = hq, p.heads_kv = hkv;
  return p;
}

void mask(Problem& p, int m) {
  if (m == 1) p.options.causal = true;
  if (m == 2) p.options.window_left = 100, p.options.window_right = 7;
  if (m == 3) p.options.softcap = 20.0f, p.options.causal = true;
}

std::vector<Problem> varlen_cases() {
  std::vector<Problem> out;
  const std::vector<int64_t> lq = {17, 0, 113, 1, 1023, 65}, lk = {113, 5, 17, 4225, 1023, 65};
  for (int64_t d : {64, 96, 128, 256})
    for (DType dtype : {DType::kBFloat16, DType::kFloat16})
      for (int m = 0; m < 4; ++m) {
        // GQA 2 (packed on sm90 where the rows are short), lengths off every tile grid, one empty.
        Problem p = varlen_problem(base(d, dtype, 4, 2), lq, lk);
        mask(p, m);
        out.push_back(p);
      }
  for (int64_t d : {64, 128}) {
    // seqused inside packed sequences (the rest NaN), and a dense padded batch with seqused.
    Problem used = varlen_problem(base(d, DType::kBFloat16, 8, 8), {70, 200, 129}, {300, 129, 64});
    used.used_q = {64, 0, 129}, used.used_k = {257, 129, 1};
    out.push_back(used);
    Problem dense = base(d, DType::kFloat16, 4, 1);
    dense.batch = 3, dense.seqlen_q = 150, dense.seqlen_k = 700;
    dense.used_q = {150, 1, 77}, dense.used_k = {700, 0, 300};
    dense.options.causal = true;
    out.push_back(dense);
  }
  return out;
}

// Decode-like: a few queries per sequence against long keys, 32 query heads on 8 KV heads, with
// split counts from 1 to more than there are key blocks, and the heuristic.
std::vector<Problem> split_cases() {
  std::vector<Problem> out;
  for (int splits : {0, 1, 2, 5, 40, 256}) {
    Problem dec = varlen_problem(base(128, DType::kBFloat16, 32, 8), {1, 16, 3}, {4225, 1023, 17});
    dec.options.num_splits = splits;
    dec.options.causal = true;
    out.push_back(dec);
    Problem dense = base(64, DType::kFloat16, 16, 2);
    dense.batch = 2, dense.seqlen_q = 5, dense.seqlen_k = 2000;
    dense.options.num_splits = splits;
    out.push_back(dense);
  }
  Problem cached = base(128, DType::kBFloat16, 32, 8);  // a dense cache with lengths: seqused_k
  cached.batch = 4, cached.seqlen_q = 1, cached.seqlen_k = 3000;
  cached.used_k = {3000, 1, 1025, 0};
  out.push_back(cached);
  // One sequence of 64k keys (the heuristic's splits over 8 KV heads' tiles), and 32 queries
  // of 4 heads a tile (128 rows: both consumers merge).
  Problem one = base(128, DType::kBFloat16, 32, 8);
  one.batch = 1, one.seqlen_q = 1, one.seqlen_k = 65536 + 77;
  out.push_back(one);
  Problem rows = varlen_problem(base(128, DType::kBFloat16, 32, 8), {32, 5}, {5000, 300});
  rows.options.causal = true;
  out.push_back(rows);
  Problem d256 = base(256, DType::kBFloat16, 8, 1);
  d256.batch = 2, d256.seqlen_q = 2, d256.seqlen_k = 1500;
  d256.options.window_left = 700;
  out.push_back(d256);
  return out;
}

std::string name_of(const testing::TestParamInfo<Problem>& info) {
  std::string s = info.param.name() + "_" + std::to_string(info.index);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class Varlen : public testing::TestWithParam<Problem> {};

// The selected kernel (sm90 on an H100/H200) and the sm80 kernel on the same problem.
TEST_P(Varlen, EachSequenceMatchesOracle) {
  SKIP_WITHOUT_GPU();
  for (Kernel kernel : {Kernel::kAuto, Kernel::kCudaSm80}) {
    Problem p = GetParam();
    p.options.kernel = kernel;
    const Report r = run_case(p);
    EXPECT_TRUE(r.ok()) << kernel_name(kernel) << ": " << r.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, Varlen, testing::ValuesIn(varlen_cases()), name_of);
INSTANTIATE_TEST_SUITE_P(Splits, Varlen, testing::ValuesIn(split_cases()), name_of);

// Bad device index tensors are caught in checked mode with the host's messages.
TEST(VarlenCuda, CheckedModeNamesTheBadEntry) {
  SKIP_WITHOUT_GPU();
  Case c(varlen_problem(base(64, DType::kBFloat16, 2, 1), {3, 4}, {5, 6}), 1);
  c.cu_k.set({1, 0, 0, 0}, 7.0);  // cu_seqlens_k = {0, 7, 11}: the last entry is not k's 11 rows
  c.cu_k.set({2, 0, 0, 0}, 6.0);
  try {
    (void)run_on_gpu(c, c.problem.options);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "seqlens.cu_seqlens_k") << e.what();
    EXPECT_NE(std::string(e.what()).find("entry 2 is 6, less than entry 1 (7)"), std::string::npos)
        << e.what();
  }
  Case u(varlen_problem(base(64, DType::kBFloat16, 2, 1), {3, 4}, {5, 6}), 2);
  u.used_q = test::HostTensor::contiguous(DType::kInt32, {2});
  u.used_q.set({0, 0, 0, 0}, 3), u.used_q.set({1, 0, 0, 0}, 5);  // sequence 1 has 4 rows
  u.problem.used_q = {3, 5};
  try {
    (void)run_on_gpu(u, u.problem.options);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "seqlens.seqused_q") << e.what();
  }
}

// The combine kernel against the CPU's on the same random partials (some splits empty, with
// garbage in their outputs).
TEST(VarlenCuda, CombineMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t S = 7, B = 3, L = 9, H = 5, D = 128;
  std::mt19937_64 rng(3);
  HostTensor o = HostTensor::contiguous(DType::kFloat32, {S * B, L, H, D});
  HostTensor l = HostTensor::contiguous(DType::kFloat32, {S, B, H, L});
  o.fill_normal(rng);
  l.fill_normal(rng, 3.0);
  for (int64_t s = 0; s < S; s += 2) l.set({s, 1, 2, 4}, -INFINITY), o.set({s * B + 1, 4, 2, 0}, NAN);
  for (int64_t s = 0; s < S; ++s) l.set({s, 2, 0, 0}, -INFINITY);
  const auto rank5 = [&](TensorRef r) {
    r.rank = 5;
    for (int d = 4; d >= 2; --d) r.shape[d] = r.shape[d - 1], r.stride[d] = r.stride[d - 1];
    r.shape[0] = S, r.shape[1] = B, r.stride[1] = r.stride[0], r.stride[0] *= B;
    return r;
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    HostTensor cpu_out = HostTensor::contiguous(dtype, {B, L, H, D}), gpu_out = cpu_out;
    HostTensor cpu_lse = HostTensor::contiguous(DType::kFloat32, {B, H, L}), gpu_lse = cpu_lse;
    const TensorRef cl = cpu_lse.ref();
    combine(rank5(o.ref()), l.ref(), cpu_out.ref(), &cl);
    gpu_out.poison(), gpu_lse.poison();
    {
      const DeviceCopy d_o(o), d_l(l), d_out(gpu_out), d_lse(gpu_lse);
      const TensorRef gl = d_lse.ref();
      combine(rank5(d_o.ref()), d_l.ref(), d_out.ref(), &gl);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      d_out.to_host(gpu_out);
      d_lse.to_host(gpu_lse);
    }
    const double tol = dtype == DType::kFloat32 ? 1e-5 : 1.0 / 128;
    gpu_out.for_each([&](const test::Index& i) { EXPECT_NEAR(gpu_out.get(i), cpu_out.get(i), tol); });
    gpu_lse.for_each([&](const test::Index& i) {
      const double a = gpu_lse.get(i), b = cpu_lse.get(i);
      if (std::isinf(b))
        EXPECT_EQ(a, b);
      else
        EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(b)));
    });
  }
}

// A non-blocking stream, destroyed with the test (null if it could not be made).
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() {
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) stream = nullptr;
  }
  ~Stream() {
    if (stream) cudaStreamDestroy(stream);
  }
};

// Decoding-like: B x Lq queries against Lk keys, 32 query heads on 8 KV heads, D = 128, bf16,
// `splits` forced, on `stream`.
Problem split_decode(int64_t B, int64_t Lq, int64_t Lk, int splits, cudaStream_t stream) {
  Problem p = base(128, DType::kBFloat16, 32, 8);
  p.batch = B, p.seqlen_q = Lq, p.seqlen_k = Lk;
  p.options.num_splits = splits;
  p.options.cuda_stream = stream;
  return p;
}

// A split decode step captured in a CUDA graph (the partial states come from the graph's own
// allocations) and replayed: the same results as the plain call.
TEST(VarlenCuda, SplitDecodeCapturedInAGraph) {
  SKIP_WITHOUT_GPU();
  const Stream owned;
  const cudaStream_t stream = owned.stream;
  ASSERT_NE(stream, nullptr);
  const auto graphed = [stream](const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                const TensorRef& out, const TensorRef* lse, const Options& o) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    forward(q, k, v, out, lse, o);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  };
  for (int splits : {12, 0}) {  // forced, and the heuristic's
    const Report r = run_case(split_decode(2, 1, 5000, splits, stream), 1, -1, graphed);
    EXPECT_TRUE(r.ok()) << splits << ": " << r.str();
  }
}

// A decode with more tiles than SMs (40 x 8 KV heads, the four query heads of each packed into one
// tile; 33 key blocks a tile, ragged ends), plain and with seqused: sm90's decode config,
// persistent CTAs walking several tiles, the V warps beside the producer warp.
TEST(VarlenCuda, DecodeWithMoreTilesThanSms) {
  SKIP_WITHOUT_GPU();
  Problem p = split_decode(40, 1, 4096 + 77, 0, nullptr);
  Report r = run_case(p);
  EXPECT_TRUE(r.ok()) << "plain: " << r.str();
  for (int64_t b = 0; b < p.batch; ++b) p.used_k.push_back(b % 3 == 0 ? 4096 + 77 : 4001 + b);
  r = run_case(p);
  EXPECT_TRUE(r.ok()) << "seqused: " << r.str();
}

// Split launches back to back on one stream: the sm90 kernel merges in the kernel through
// per-stream arrival counters that each launch leaves at zero. Launches with other split counts
// and more tiles (which grow the counters) go first, into another output; the checked call's
// rows would stay NaN if a counter were left off zero.
TEST(VarlenCuda, SplitLaunchesBackToBackLeaveTheirCountersAtZero) {
  SKIP_WITHOUT_GPU();
  const Stream owned;
  ASSERT_NE(owned.stream, nullptr);
  const auto runner = [](const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                         const TensorRef* lse, const Options& o) {
    const int64_t B = q.shape[0], L = q.shape[1], H = q.shape[2], D = q.shape[3];
    void* other = nullptr;
    ASSERT_EQ(cudaMalloc(&other, B * L * H * D * dtype_size(q.dtype)), cudaSuccess);
    const TensorRef scratch = TensorRef::contiguous(other, q.dtype, {B, L, H, D}, q.device);
    for (int splits : {3, 9, 40, 0}) {
      Options first = o;
      first.num_splits = splits;
      forward(q, k, v, scratch, nullptr, first);
    }
    forward(q, k, v, out, lse, o);
    ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(o.cuda_stream)), cudaSuccess);
    cudaFree(other);
  };
  for (int checked : {9, 0}) {  // forced, and the heuristic's
    const Report r = run_case(split_decode(3, 2, 3000, checked, owned.stream), 1, -1, runner);
    EXPECT_TRUE(r.ok()) << checked << ": " << r.str();
  }
}

}  // namespace
}  // namespace tileattn::cuda_test
