// cuda_case.h: GPU test cases: strided host/device tensors with poison and gap sentinels, one
// run of forward() on the GPU, and its errors next to eager's against the fp64 oracle.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tileattn/tileattn.h"

namespace tileattn::cuda_test {

// How a [B, L, H, D] tensor (or a [B, H, L] LSE) sits in memory.
enum class Layout {
  kContiguous,  // row-major in the logical order
  kPermuted,    // [B, H, L, D] storage (LSE: [B, L, H]) passed as a permuted view
  kPadded,      // every head and row padded (strides stay multiples of 8 elements)
};

// A strided tensor with host storage and a device copy. Storage outside the view ("gaps") holds
// NaN in inputs (a read there shows in the result) and a sentinel in outputs (a stray write).
class Tensor {
 public:
  Tensor(DType dtype, std::vector<int64_t> shape, Layout layout);
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

  TensorRef host_ref();
  TensorRef device_ref();
  int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3 = 0) const;  // storage element
  double get(int64_t i0, int64_t i1, int64_t i2, int64_t i3 = 0) const;
  void set(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x);
  int64_t dim(int d) const { return shape_[d]; }

  void fill_random(std::mt19937_64& rng, double amplitude);  // view ~ U(-a, a), gaps NaN
  void poison();                                             // view NaN, gaps sentinel
  void to_device();
  void from_device();
  int64_t gaps_changed() const;  // gap elements that no longer hold the sentinel

 private:
  DType dtype_;
  std::vector<int64_t> shape_, stride_;
  int64_t storage_ = 0;
  std::vector<unsigned char> host_;
  std::vector<char> in_view_;
  void* device_ = nullptr;
  uint64_t raw(int64_t pos) const;
  void set_raw(int64_t pos, uint64_t bits);
};

struct Problem {
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  DType dtype = DType::kBFloat16;
  Options options;
  Layout q_layout = Layout::kContiguous, kv_layout = Layout::kContiguous, out_layout = Layout::kContiguous,
         lse_layout = Layout::kContiguous;
  bool with_lse = true;
  double q_amplitude = 2.0;  // spread of the logits: larger makes softmax peakier
  std::string name() const;
  std::string test_name() const;  // name() with every non-alphanumeric character as '_' (gtest)
};

struct Report {
  double err_out = 0, err_lse = 0;      // ours vs oracle (max abs)
  double eager_out = 0, eager_lse = 0;  // eager (CPU, same dtype and inputs) vs oracle
  int64_t mismatches = 0;    // non-finite oracle values not matched exactly, non-finite where it is finite
  int64_t gaps_changed = 0;  // stray writes outside out / lse views
  double atol_o = 0, atol_l = 0;  // the absolute tolerances of this dtype
  std::string first_mismatch;
  bool ok() const;  // the accuracy rule (see cuda_case.cc)
  std::string str() const;
};

// What runs the problem on the GPU: forward() unless a test passes another (a kernel config
// the library does not select, say), with forward()'s arguments.
using GpuRunner = std::function<void(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                     const TensorRef& out, const TensorRef* lse, const Options& options)>;

// Runs p on the GPU through forward() (or `runner`) and measures it. nan_at_key >= 0 puts a NaN
// into that key of (batch 0, kv head 0) first.
Report run_case(const Problem& p, uint64_t seed = 1, int64_t nan_at_key = -1, const GpuRunner& runner = {});

// The absolute tolerances added to 2 * err(eager).
double atol_out(DType dtype);
double atol_lse(DType dtype);

}  // namespace tileattn::cuda_test
