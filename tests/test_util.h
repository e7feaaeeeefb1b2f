// test_util.h: the test harness of the CPU and the GPU suites alike: strided host tensors with
// poison and sentinels, one Problem description (dense or varlen), runs of forward/eager/oracle,
// error measurement against the fp64 oracle, and one tolerance table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tileattn/tileattn.h"

namespace tileattn::test {

using Index = std::array<int64_t, 4>;

// How a [B, L, H, D] tensor sits in memory.
enum class Layout {
  kContiguous,  // [B, L, H, D] row-major
  kBHLD,        // [B, H, L, D] row-major storage, passed as a permuted view
  kStrided,     // head_dim stride 2, every row and head padded (gaps between all elements)
  kPadded,      // head_dim stride 1, rows and heads padded
  kAligned,     // head_dim stride 1, rows and heads padded by whole 16-byte units (what GPUs take)
};
// How the [B, H, L] LSE sits in memory.
enum class LseLayout {
  kContiguous,  // [B, H, L] row-major
  kPadded,      // seqlen stride 1, heads and batches padded
  kBLH,         // [B, L, H] storage (stride 1 over heads), passed as a permuted view
};
const char* layout_name(Layout layout);
const char* lse_layout_name(LseLayout layout);

// A view of `shape` with element strides `stride` inside its own storage, which keeps `guard`
// elements before the view's first element and after its last one. Storage elements outside the
// view are "gaps": inputs fill them with NaN (a read there shows up in the result), outputs with
// a sentinel (a write there is caught).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> stride, int64_t guard = 8);
  static HostTensor contiguous(DType dtype, std::vector<int64_t> shape, int64_t guard = 8);
  // A [B, L, H, D] tensor in the given layout.
  static HostTensor blhd(DType dtype, int64_t B, int64_t L, int64_t H, int64_t D, Layout layout);
  // A [B, H, L] tensor in the given layout.
  static HostTensor bhl(DType dtype, int64_t B, int64_t H, int64_t L, LseLayout layout);

  TensorRef ref() const;
  DType dtype() const { return dtype_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int d) const { return shape_[d]; }
  int64_t numel() const;

  // Storage element index of a view element (unused trailing indices are ignored).
  int64_t position(const Index& idx) const;
  double get(const Index& idx) const;
  void set(const Index& idx, double x);
  uint64_t bits_at(int64_t position) const;
  void for_each(const std::function<void(const Index&)>& f) const;

  // Inputs: view elements ~ N(0, stddev) rounded to the dtype, gaps NaN.
  void fill_normal(std::mt19937_64& rng, double stddev = 1.0);
  // Outputs: view elements get the poison NaN pattern, gaps the sentinel.
  void poison();
  int64_t count_unwritten() const;  // view elements that still hold the poison pattern
  bool is_poison(const Index& idx) const;
  int64_t count_gaps_changed() const;  // gap elements that lost the sentinel
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_, stride_;
  int64_t base_ = 0;  // storage element of the view's element [0, 0, ...]
  std::vector<std::byte> bytes_;
  std::vector<char> in_view_;  // per storage element
};

// One attention problem: sizes, dtype, layouts and options.
struct Problem {
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 16;
  DType dtype = DType::kFloat32;
  Layout q_layout = Layout::kContiguous, kv_layout = Layout::kContiguous, out_layout = Layout::kContiguous;
  LseLayout lse_layout = LseLayout::kContiguous;
  Options options;
  double input_stddev = 1.0;
  bool with_lse = true;  // pass an LSE output (else none, and nothing may be written there)

  // Variable-length batches (DESIGN.md section 6). packed_q: q and out are packed [total_q, Hq,
  // D] with cu_seqlens_q from lens_q (batch = lens_q.size(), seqlen_q = the longest); else they
  // are dense. used_q: seqused_q (empty: none), the rows that count; a sequence's other rows hold
  // NaN in q and must stay unwritten in out and lse. The same for k (and v) with packed_k,
  // lens_k, used_k.
  bool packed_q = false, packed_k = false;
  std::vector<int64_t> lens_q, lens_k, used_q, used_k;
  bool varlen() const { return packed_q || packed_k || !used_q.empty() || !used_k.empty(); }
  int64_t len_q(int64_t b) const;  // the rows of sequence b that count
  int64_t len_k(int64_t b) const;

  // A readable gtest-safe name: "fp16_B2_Lq17_Lk63_H4x2_D59_causal_bhld".
  std::string name() const;
  std::string test_name() const { return name(); }
};

// Sets the rows of t (q, dout or out when side_q, else k or v) that do not count (past seqused)
// to NaN: they must not reach any result.
void poison_unused_rows(HostTensor& t, const Problem& p, bool side_q);

// A varlen problem: sequences of these query and key lengths (packed), the rest as `base`.
Problem varlen_problem(Problem base, std::vector<int64_t> lens_q, std::vector<int64_t> lens_k);

// gtest prints a Problem by its name (instead of its bytes).
inline void PrintTo(const Problem& p, std::ostream* os) { *os << p.name(); }

// Does query row i of sequence b see key j? Computed by brute force from the options
// (DESIGN.md section 1), each sequence bottom-right aligned on its own lengths.
bool sees(const Problem& p, int64_t i, int64_t j, int64_t b = 0);
int64_t visible_keys(const Problem& p, int64_t i, int64_t b = 0);

// A problem's random inputs and, once run_oracle() is called, its fp64 truth (in the layout of
// out and lse, rows that must stay unwritten left poisoned).
struct Case {
  Problem problem;
  HostTensor q, k, v;
  HostTensor cu_q, cu_k, used_q, used_k;  // int32 index tensors (empty when not given)
  HostTensor ref_out, ref_lse;            // fp64, contiguous

  explicit Case(const Problem& p, uint64_t seed = 1234);
  void run_oracle();
  // The varlen description of this case over index tensor views `view` makes of the four
  // index tensors above (host views for the CPU, device copies for CUDA); *refs holds them.
  Seqlens seqlens(const std::function<TensorRef(const HostTensor&)>& view,
                  std::array<TensorRef, 4>* refs) const;
};

struct Result {
  HostTensor out, lse;  // in the problem's dtype (lse fp32) and output layouts
};
Result fresh_outputs(const Problem& p);  // poisoned, in the problem's output layouts
// A tensor shaped like the problem's q (or k): packed or dense in `layout`, of `dtype`.
HostTensor like_q(const Problem& p, DType dtype, Layout layout);
HostTensor like_k(const Problem& p, DType dtype, Layout layout);

// Fresh poisoned outputs, then forward() / eager() with the problem's options (or `options`).
Result run_forward(const Case& c);
Result run_forward(const Case& c, const Options& options);
Result run_eager(const Case& c, EagerStats* stats = nullptr);

// Largest |ours - oracle| over O and over LSE. Non-finite oracle values (-inf LSE of an empty
// row, NaN from NaN inputs) must be matched exactly; `mismatches` counts those that are not,
// and elements the oracle left unwritten (rows past seqused) that ours wrote.
struct Errors {
  double out = 0.0, lse = 0.0;
  int64_t mismatches = 0;
  std::string first_mismatch;  // where and what, for the failure message
};
Errors measure(const Result& r, const Case& c);
// Sequence b of a [B, L, H, D] tensor (or rows start.. of a packed [total, H, D] one) as a
// [1, len, H, D] view; an LSE-like [H, total] / [B, H, L] tensor with seq_lse_view.
TensorRef seq_view(const HostTensor& t, bool packed, int64_t start, int64_t b, int64_t len);
TensorRef seq_lse_view(const HostTensor& t, bool packed, int64_t start, int64_t b, int64_t len);
// Eager's error on the case, each sequence of a varlen batch run as a dense problem of its own.
Errors eager_errors(const Case& c);

// The accuracy rule: err(ours) <= 2 * err(eager) + atol for O and LSE, every element written,
// nothing outside the views written, empty rows exactly O = 0 and LSE = -inf.
struct Atol {
  double out, lse;
};
Atol atol_for(DType dtype, DeviceKind device = DeviceKind::kCPU);

// The rule applied to one result: ours and eager's errors, the bound, stray and missing writes.
struct Report {
  Errors ours, eager;
  Atol atol{};
  int64_t unwritten = 0, gaps_changed = 0;
  bool ok() const;
  std::string str() const;
};
// r against c's oracle (run_oracle() done) with eager's error on the CPU as the yardstick.
Report judge(const Result& r, const Case& c, DeviceKind device);
void expect_written(const Result& r, const char* what);
void expect_empty_rows_exact(const Result& r, const Case& c);

// Bitwise equality of two results' storage.
bool same_bits(const Result& a, const Result& b);

// A normal random number generator seeded deterministically from a string (a test's name).
std::mt19937_64 rng_for(const std::string& name);

}  // namespace tileattn::test
