// test_util.h: shared test helpers: strided host tensors with poison and sentinels, a Problem
// description, runs of forward/eager/oracle, and error measurement against the fp64 oracle.
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
  int64_t count_unwritten() const;     // view elements that still hold the poison pattern
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

  // A readable gtest-safe name: "fp16_B2_Lq17_Lk63_H4x2_D59_causal_bhld".
  std::string name() const;
};

// gtest prints a Problem by its name (instead of its bytes).
inline void PrintTo(const Problem& p, std::ostream* os) { *os << p.name(); }

// Does query row i see key j? Computed by brute force from the options (DESIGN.md section 1).
bool sees(const Problem& p, int64_t i, int64_t j);
int64_t visible_keys(const Problem& p, int64_t i);

// A problem's random inputs and, once run_oracle() is called, its fp64 truth.
struct Case {
  Problem problem;
  HostTensor q, k, v;
  HostTensor ref_out, ref_lse;  // fp64, contiguous

  explicit Case(const Problem& p, uint64_t seed = 1234);
  void run_oracle();
};

struct Result {
  HostTensor out, lse;  // in the problem's dtype (lse fp32) and output layouts
};

// Fresh poisoned outputs, then forward() / eager() with the problem's options (or `options`).
Result run_forward(const Case& c);
Result run_forward(const Case& c, const Options& options);
Result run_eager(const Case& c, EagerStats* stats = nullptr);

// Largest |ours - oracle| over O and over LSE. Non-finite oracle values (-inf LSE of an empty
// row, NaN from NaN inputs) must be matched exactly; `mismatches` counts those that are not.
struct Errors {
  double out = 0.0, lse = 0.0;
  int64_t mismatches = 0;
  std::string first_mismatch;  // where and what, for the failure message
};
Errors measure(const Result& r, const Case& c);

// The accuracy rule: err(ours) <= 2 * err(eager) + atol for O and LSE, every element written,
// nothing outside the views written, empty rows exactly O = 0 and LSE = -inf.
struct Atol {
  double out, lse;
};
Atol atol_for(DType dtype);
void expect_written(const Result& r, const char* what);
void expect_empty_rows_exact(const Result& r, const Case& c);

// Bitwise equality of two results' storage.
bool same_bits(const Result& a, const Result& b);

// A normal random number generator seeded deterministically from a string (a test's name).
std::mt19937_64 rng_for(const std::string& name);

}  // namespace tileattn::test
