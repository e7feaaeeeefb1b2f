// kvcache_case.h: forward_kvcache test cases, shared by the CPU suite (kvcache_test.cc) and the
// GPU one (cuda/kvcache_test.cc): a cache (contiguous with batch indices, or paged with shuffled
// pages), new keys and values, rotary tables, and the check of one run: the appended slots hold
// the rotated new rows, every other cache byte is unchanged, and each sequence's output matches
// the fp64 oracle run on its keys gathered from the updated cache (positions [leftpad,
// cache_seqlens + new)), with q rotated by an independent implementation, by the 2x rule.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "test_util.h"

namespace tileattn::test {

struct KvSpec {
  int64_t batch = 3, len_q = 1, len_new = 1, hq = 4, hkv = 2, d = 32;
  int64_t capacity = 80, page_size = 0;  // page_size 0: a contiguous cache
  std::vector<int64_t> seqlens = {10, 0, 57}, leftpad;
  // Non-empty: q (and out, lse) packed with these query rows per sequence (cu_seqlens_q), and
  // k_new / v_new packed with these new keys per sequence (cu_seqlens_k_new).
  std::vector<int64_t> lens_q, lens_new;
  bool batch_idx = false, rotary = false, interleaved = true, rotary_fp32 = false;
  int64_t rotary_dim = 16;
  DType dtype = DType::kFloat32;
  Options options;
  std::string name() const;
  int64_t queries(int64_t b) const { return lens_q.empty() ? len_q : lens_q[b]; }
  int64_t new_keys(int64_t b) const { return lens_new.empty() ? len_new : lens_new[b]; }
  bool appends() const;  // new keys are given (k_new / v_new)
};

// gtest prints a spec by its name (instead of its bytes).
inline void PrintTo(const KvSpec& s, std::ostream* os) { *os << s.name(); }

HostTensor int_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape);

struct KvCase {
  KvSpec s;
  HostTensor q, k_cache, v_cache, k_new, v_new, cos, sin, table, seqlens, batch_idx, leftpad, cu_q, cu_new;
  std::vector<int64_t> pages, rows;         // page_table values (B x max_pages), cache row of each sequence
  std::vector<int64_t> q_start, new_start;  // each sequence's first packed row (0 when dense)
  int64_t max_pages = 0;

  explicit KvCase(const KvSpec& spec);
  // Element [pos, h, d] of sequence b's cache, as an index into k_cache / v_cache.
  Index at(int64_t b, int64_t pos, int64_t h, int64_t d) const;
  // Element (i, h, d) of sequence b of q (or out) and of k_new / v_new; (h, i) of the LSE.
  Index q_at(int64_t b, int64_t i, int64_t h, int64_t d) const;
  Index new_at(int64_t b, int64_t i, int64_t h, int64_t d) const;
  Index lse_at(int64_t b, int64_t h, int64_t i) const;
  // Fresh poisoned out and lse in q's layout.
  Result fresh_outputs() const;
  // The call's arguments over the tensors `view` makes (host views, or device mirrors); *refs
  // holds the views.
  KvCache args(const std::function<TensorRef(const HostTensor&)>& view, std::vector<TensorRef>* refs) const;
  KvCache args() const;  // over the host tensors
};

// Runs forward_kvcache on kc's arguments (options as given), the caches updated in place in kc
// and the outputs in *r (already poisoned).
using KvRun = std::function<void(KvCase& kc, Result* r, const Options& options)>;

// One case run by `run` and checked. On the CPU the appended slots must equal the test's own
// rotation bit for bit; on CUDA (device kCUDA) they must be within one ulp of the CPU
// forward_kvcache's, and the outputs are judged with CUDA's tolerances.
void check_kvcache(const KvSpec& spec, DeviceKind device, const KvRun& run);

// forward_kvcache on the host tensors (the CPU kernel, whatever options.kernel asks of a GPU).
void run_kvcache_cpu(KvCase& kc, Result* r, const Options& options);

}  // namespace tileattn::test
