// backward_util.h: the backward's test harness, shared by the CPU suite and the GPU tests: a
// case with its forward done and random output (and LSE) gradients, the fp64 oracle, eager's
// gradients in the same dtype (per sequence for varlen batches), and the accuracy rule
// err(ours) <= 3 err(eager) + atol for dq, dk and dv each, with every element written and
// nothing outside the views.
#pragma once

#include <array>
#include <functional>

#include "test_util.h"

namespace tileattn::test {

struct Grads {
  HostTensor dq, dk, dv;
};
Grads fresh_grads(const Problem& p, DType dtype);  // poisoned, in q's and k's layouts
bool same_bits(const Grads& a, const Grads& b);    // dq, dk and dv, byte for byte

// A case with its forward done on the CPU (out, lse), a random output gradient and, with
// `with_dlse`, a random gradient of the LSE too.
struct BackwardCase {
  Case c;
  Result fwd;
  HostTensor dout, dlse;
  std::array<TensorRef, 4> index_refs;
  Seqlens seqlens;  // host views
  bool with_dlse = false;

  explicit BackwardCase(const Problem& p, bool with_dlse = false);
  const TensorRef* dlse_ref() const;        // null without dlse
  Grads run(const Options& options) const;  // backward() on the CPU
  Grads oracle() const;
  Grads eager() const;  // per sequence for varlen batches (rows outside them stay poisoned)
};

// What computes the gradients under test: the CPU backward unless given (the GPU tests).
using BackwardRunner = std::function<Grads(const BackwardCase&, const Options&)>;

// Runs the case, judges dq, dk and dv against the oracle with eager's error as the yardstick.
void check_backward(const Problem& p, bool with_dlse = false, const BackwardRunner& runner = {});

}  // namespace tileattn::test
