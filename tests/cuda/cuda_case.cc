// cuda_case.cc: GPU runs of test cases (cuda_case.h).
#include "cuda_case.h"

#include <cuda_runtime.h>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

namespace tileattn::cuda_test {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

DeviceCopy::DeviceCopy(const HostTensor& t) : host_(t) {
  const size_t bytes = t.bytes().size();
  check(cudaMalloc(&device_, bytes + 16), "cudaMalloc");
  check(cudaMemcpy(device_, t.bytes().data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

DeviceCopy::~DeviceCopy() { (void)cudaFree(device_); }

TensorRef DeviceCopy::ref() const {
  TensorRef r = host_.ref();
  r.data = static_cast<char*>(device_) +
           (static_cast<const char*>(r.data) - reinterpret_cast<const char*>(host_.bytes().data()));
  r.device = Device::cuda(0);
  return r;
}

void DeviceCopy::to_host(HostTensor& t) const {
  check(
      cudaMemcpy(const_cast<std::byte*>(t.bytes().data()), device_, t.bytes().size(), cudaMemcpyDeviceToHost),
      "cudaMemcpy D2H");
}

void DeviceCopy::from_host() const {
  check(cudaMemcpy(device_, host_.bytes().data(), host_.bytes().size(), cudaMemcpyHostToDevice),
        "cudaMemcpy H2D");
}

Result run_on_gpu(const Case& c, const Options& options, const GpuRunner& runner) {
  const Problem& p = c.problem;
  Result r = test::fresh_outputs(p);
  const DeviceCopy q(c.q), k(c.k), v(c.v), out(r.out), lse(r.lse);
  const TensorRef lse_ref = lse.ref();
  const TensorRef* lse_arg = p.with_lse ? &lse_ref : nullptr;
  if (p.varlen()) {
    // Index tensors on the device too; the checked mode validates them there.
    const DeviceCopy cu_q(c.cu_q), cu_k(c.cu_k), used_q(c.used_q), used_k(c.used_k);
    std::array<TensorRef, 4> refs;
    const Seqlens s = c.seqlens(
        [&](const HostTensor& t) {
          const DeviceCopy* d = &t == &c.cu_q     ? &cu_q
                                : &t == &c.cu_k   ? &cu_k
                                : &t == &c.used_q ? &used_q
                                                  : &used_k;
          return d->ref();
        },
        &refs);
    Options o = options;
    o.check_indices = true;
    forward_varlen(q.ref(), k.ref(), v.ref(), out.ref(), lse_arg, s, o);
  } else {
    (runner ? runner : GpuRunner(forward))(q.ref(), k.ref(), v.ref(), out.ref(), lse_arg, options);
  }
  if (options.cuda_stream)
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(options.cuda_stream)), "stream sync");
  check(cudaDeviceSynchronize(), "kernel");
  out.to_host(r.out);
  lse.to_host(r.lse);
  return r;
}

Report run_case(const Problem& p, uint64_t seed, int64_t nan_at_key, const GpuRunner& runner) {
  Case c(p, seed * 7919 + static_cast<uint64_t>(p.seqlen_q * 131 + p.seqlen_k * 17 + p.head_dim));
  if (nan_at_key >= 0) c.k.set({0, nan_at_key, 0, 0}, std::numeric_limits<double>::quiet_NaN());
  c.run_oracle();
  return test::judge(run_on_gpu(c, p.options, runner), c, DeviceKind::kCUDA);
}

// The case's inputs, forward results and gradients (poisoned) on the device, backward there, the
// gradients back on the host.
test::Grads gpu_backward(const test::BackwardCase& bc, const Options& options) {
  return gpu_backward_runs(bc, options, 1, {});
}

test::Grads gpu_backward_runs(const test::BackwardCase& bc, const Options& options, int runs,
                              const std::function<void(int, const test::Grads&)>& each) {
  const Problem& p = bc.c.problem;
  test::Grads g = test::fresh_grads(p, p.dtype);
  const DeviceCopy dout(bc.dout), q(bc.c.q), k(bc.c.k), v(bc.c.v), out(bc.fwd.out), lse(bc.fwd.lse),
      dlse(bc.dlse), dq(g.dq), dk(g.dk), dv(g.dv);
  const TensorRef dlse_ref = dlse.ref();
  const TensorRef* dl = bc.with_dlse ? &dlse_ref : nullptr;
  const auto finish = [&](int run) {
    if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("backward kernels failed");
    dq.to_host(g.dq), dk.to_host(g.dk), dv.to_host(g.dv);
    if (each) each(run, g);
  };
  if (p.varlen()) {
    const DeviceCopy cu_q(bc.c.cu_q), cu_k(bc.c.cu_k), used_q(bc.c.used_q), used_k(bc.c.used_k);
    std::array<TensorRef, 4> refs;
    const Seqlens s = bc.c.seqlens(
        [&](const HostTensor& t) {
          return (&t == &bc.c.cu_q     ? cu_q
                  : &t == &bc.c.cu_k   ? cu_k
                  : &t == &bc.c.used_q ? used_q
                                       : used_k)
              .ref();
        },
        &refs);
    Options o = options;
    o.check_indices = true;
    for (int run = 0; run < runs; ++run) {
      backward_varlen(dout.ref(), q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), dq.ref(), dk.ref(),
                      dv.ref(), s, o, dl);
      finish(run);
    }
  } else {
    for (int run = 0; run < runs; ++run) {
      backward(dout.ref(), q.ref(), k.ref(), v.ref(), out.ref(), lse.ref(), dq.ref(), dk.ref(), dv.ref(),
               options, dl);
      finish(run);
    }
  }
  return g;
}

std::string sm90_unavailable_reason() {
  static const std::string reason = [] {
    void* d = nullptr;
    if (cuda_device_count() == 0) return std::string("no CUDA device");
    if (cudaMalloc(&d, 4 * 128) != cudaSuccess) return std::string("cudaMalloc failed");
    // q, k, v and out in four distinct 128-byte rows (outputs may not alias inputs).
    const auto at = [&](int i) {
      return TensorRef::contiguous(static_cast<char*>(d) + 128 * i, DType::kBFloat16, {1, 1, 1, 64},
                                   Device::cuda(0));
    };
    Options o;
    o.kernel = Kernel::kCudaSm90;
    const Support s = supported(at(0), at(1), at(2), at(3), nullptr, o);
    cudaFree(d);
    return s.ok ? std::string() : s.reason;
  }();
  return reason;
}

bool sm90_available() { return sm90_unavailable_reason().empty(); }

}  // namespace tileattn::cuda_test
