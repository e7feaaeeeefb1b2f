// verify.h: `tileattn verify`'s flags, shared by its forward check (cmd_verify.cc) and its
// backward check (cmd_verify_backward.cc).
#pragma once

#include <cstdint>
#include <string>

#include "shape.h"
#include "tileattn/tileattn.h"

namespace tileattn::cli {

struct VerifyArgs {
  int64_t batch = 2, heads = 8, kv_heads = 0, seqlen_q = 257, seqlen_k = 0, head_dim = 64;
  std::string dtype, device = "cpu", window, kernel = "auto";  // dtype "": fp32 on the CPU, bf16 on a GPU
  bool causal = false, backward = false;
  double softcap = 0, scale = 0;
  int64_t seed = 0;
  int threads = 0;
};

// --backward: backward() against eager_backward() and reference_backward() (fp64) on random
// inputs and output gradient; the exit status as for the forward check.
int run_verify_backward(const VerifyArgs& a, const Shape& shape, DType dtype, Device device,
                        const Options& options);

}  // namespace tileattn::cli
