// sanitize_small.cc: a handful of small problems that touch every kernel path (each compiled head
// dim and a padded one, both mask policies, ragged ends, empty rows, softcap, fp16, strided
// views, no keys at all, GQA packing), sized to run under compute-sanitizer (memcheck,
// racecheck, synccheck).
// Exits non-zero when a result is wrong.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda_case.h"
#include "kvcache_gpu.h"

using namespace tileattn;
using namespace tileattn::cuda_test;

int main() {
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::vector<Problem> problems;
  auto add = [&](int64_t lq, int64_t lk, int64_t d, DType dtype, int mask) {
    Problem p;
    p.seqlen_q = lq, p.seqlen_k = lk, p.head_dim = d, p.dtype = dtype, p.heads_q = 2, p.heads_kv = 1;
    if (mask == 1) p.options.causal = true;
    if (mask == 2) p.options.window_left = 20, p.options.window_right = 3;
    if (mask == 3) p.options.softcap = 20.0f;
    problems.push_back(p);
  };
  for (int64_t d : {64, 96, 128, 256}) {
    add(150, 140, d, DType::kBFloat16, 0);
    add(150, 140, d, DType::kBFloat16, 1);
  }
  add(70, 200, 40, DType::kFloat16, 2);
  add(200, 70, 64, DType::kBFloat16, 1);  // rows before the first key: empty
  add(33, 300, 128, DType::kFloat16, 3);
  add(5, 0, 64, DType::kBFloat16, 0);  // no keys at all
  Problem decode;                      // GQA packing on sm90: 8 query heads of one KV head in a tile
  decode.dtype = DType::kBFloat16;
  decode.seqlen_q = 3, decode.seqlen_k = 300, decode.head_dim = 128, decode.heads_q = 8, decode.heads_kv = 1;
  decode.options.causal = true;
  problems.push_back(decode);
  Problem strided;
  strided.dtype = DType::kBFloat16;
  strided.seqlen_q = 65, strided.seqlen_k = 129, strided.head_dim = 72, strided.heads_q = 4,
  strided.heads_kv = 2;
  strided.q_layout = Layout::kBHLD, strided.kv_layout = Layout::kAligned,
  strided.out_layout = Layout::kAligned;
  strided.lse_layout = LseLayout::kBLH;
  strided.options.causal = true;
  problems.push_back(strided);

  // Serving paths: a packed varlen batch (the O store without TMA, a ragged last V block zeroed
  // by the producer), seqused with NaN rows, forced splits and their combine, sm90 and sm80.
  for (int64_t d : {64, 128}) {
    Problem varlen = test::varlen_problem(decode, {3, 0, 70}, {129, 5, 200});
    varlen.head_dim = d, varlen.heads_q = 4, varlen.heads_kv = 2;
    varlen.used_k = {100, 5, 200};
    problems.push_back(varlen);
    Problem split = decode;
    split.head_dim = d, split.seqlen_k = 700, split.options.num_splits = 3;
    problems.push_back(split);
    split.options.kernel = Kernel::kCudaSm80;
    problems.push_back(split);
  }
  // sm90's decode config (a long contiguous decode: V by the producer's warps):
  // 33 key blocks a CTA, a ragged end, seqused.
  Problem stream = decode;
  stream.batch = 2, stream.seqlen_q = 1, stream.seqlen_k = 4096 + 77, stream.heads_q = 4;
  stream.used_k = {4096 + 77, 4001};
  problems.push_back(stream);
  Problem plain = stream;  // the same without seqused: one split, no sequence tensors
  plain.used_k.clear();
  problems.push_back(plain);

  int failed = 0;
  for (const Problem& p : problems) {
    const Report r = run_case(p);
    std::printf("%-60s %s  %s\n", p.name().c_str(), r.ok() ? "ok  " : "FAIL", r.str().c_str());
    failed += !r.ok();
  }

  // A KV-cache decode step: the append kernel (rotary, a packed q, packed new keys) and, split,
  // the sm80 kernel through a page table of odd pages (with left padding), then pages of 16 (the
  // sm90 kernel's boxes on Hopper), then the odd pages forced onto sm90 (its cp.async gathers),
  // then a long decode over pages of 16 (35 key blocks a CTA, a box a page, a ragged end);
  // against the CPU forward_kvcache.
  const struct {
    int64_t page;
    bool sm90, decode;
  } kv_runs[] = {{7, false, false}, {16, false, false}, {7, true, false}, {16, false, true}};
  for (const auto& run : kv_runs) {
    if (run.sm90 && !sm90_available()) continue;
    const int64_t page = run.page;
    test::KvSpec s;
    s.dtype = DType::kBFloat16, s.page_size = page, s.d = 64, s.hq = 4, s.hkv = 2;
    s.lens_q = {1, 2, 1}, s.lens_new = {1, 2, 0};
    if (page == 7) s.leftpad = {2, 0, 9};
    s.rotary = true, s.interleaved = false, s.options.causal = true, s.options.num_splits = 3;
    if (run.decode) {
      s.d = 128, s.capacity = 4300, s.seqlens = {4200, 1, 40}, s.lens_q = {}, s.lens_new = {};
      s.len_q = 1, s.len_new = 1, s.options.num_splits = 1;
    }
    if (run.sm90) s.options.kernel = Kernel::kCudaSm90;
    test::KvCase gpu(s), cpu(s);
    Result r = gpu.fresh_outputs(), want = cpu.fresh_outputs();
    run_kvcache_gpu(gpu, &r, s.options);
    test::run_kvcache_cpu(cpu, &want, s.options);
    double err = 0;
    const auto worst = [](double e, double d) { return std::isnan(d) || d > e ? d : e; };  // NaN sticks
    r.out.for_each([&](const test::Index& i) { err = worst(err, std::abs(r.out.get(i) - want.out.get(i))); });
    r.lse.for_each([&](const test::Index& i) { err = worst(err, std::abs(r.lse.get(i) - want.lse.get(i))); });
    const bool ok =
        err <= 0.05 && r.out.count_unwritten() == 0 && r.lse.count_unwritten() == 0;  // NaN fails the <=
    std::printf("%-60s %s  max |gpu - cpu| %.3g\n", s.name().c_str(), ok ? "ok  " : "FAIL", err);
    failed += !ok;
  }

#if defined(TILEATTN_CUDA_BACKWARD)
  // The backward kernels (preprocessing, dK/dV in one pass and in two at D = 256, dQ; both mask
  // policies, ragged ends, GQA, a varlen batch with seqused, an LSE gradient; on Hopper the sm90
  // backward too). Accuracy is the
  // GPU suite's job; here a result only has to be near the oracle (5% of the largest gradient).
  std::vector<Problem> backward_problems;
  for (int64_t d : {64, 96, 256}) {
    Problem p;
    p.dtype = DType::kBFloat16, p.seqlen_q = 90, p.seqlen_k = 130, p.head_dim = d, p.heads_q = 4,
    p.heads_kv = 2;
    backward_problems.push_back(p);
    p.options.causal = true, p.options.softcap = 10.0f;
    backward_problems.push_back(p);
  }
  Problem bwd_varlen = test::varlen_problem(decode, {3, 0, 70}, {129, 5, 200});
  bwd_varlen.heads_q = 4, bwd_varlen.heads_kv = 2, bwd_varlen.used_k = {100, 5, 200};
  bwd_varlen.options.window_left = 30;
  backward_problems.push_back(bwd_varlen);
  // The sm90 backward (asked for): both head dims, masked and deterministic, over several query
  // blocks a CTA (D = 64's 128-row steps: 3 blocks x 2 heads, each stage and dQ buffer reused).
  if (sm90_available())
    for (int64_t d : {64, 128, 256}) {
      Problem p;
      p.dtype = DType::kBFloat16, p.seqlen_q = 300, p.seqlen_k = 200, p.head_dim = d, p.heads_q = 4,
      p.heads_kv = 2, p.batch = 2;
      p.options.kernel = Kernel::kCudaSm90;
      backward_problems.push_back(p);
      p.options.causal = true, p.options.softcap = 10.0f, p.options.deterministic = true;
      backward_problems.push_back(p);
      // Packed and seqused: the loader zeroes the rows of ragged blocks (bwd_loader.cuh).
      Problem v = test::varlen_problem(p, {3, 0, 150}, {129, 5, 200});
      v.used_q = {3, 0, 140}, v.used_k = {100, 5, 200};
      backward_problems.push_back(v);
    }
  for (const Problem& p : backward_problems) {
    const test::BackwardCase bc(p, true);
    const test::Grads ours = gpu_backward(bc, p.options), ref = bc.oracle();
    double err = 0, scale = 0;
    for (auto [x, r] : {std::pair{&ours.dq, &ref.dq}, {&ours.dk, &ref.dk}, {&ours.dv, &ref.dv}})
      r->for_each([&](const test::Index& i) {
        if (r->is_poison(i)) return;
        const double d = std::abs(x->get(i) - r->get(i));
        err = std::isnan(d) || d > err ? d : err;  // a NaN gradient sticks (std::max would drop it)
        scale = std::max(scale, std::abs(r->get(i)));
      });
    const bool ok = err <= 0.05 * std::max(1.0, scale);  // NaN fails
    std::printf("backward %-51s %s  err %.3g, |grad| %.3g\n", p.name().c_str(), ok ? "ok  " : "FAIL", err,
                scale);
    failed += !ok;
  }
  const size_t total = problems.size() + backward_problems.size();
#else
  const size_t total = problems.size();
#endif
  std::printf("%zu passed, %d failed\n", total - failed, failed);
  return failed == 0 ? 0 : 1;
}
