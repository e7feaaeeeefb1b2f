// backward.cc: the public backward entry points: validate once (the forward's arguments through
// make_params, then dout and the gradients), select, run.
#include <string>

#include "api/device_caps.h"
#include "api/validate.h"
#include "cpu/cpu_backward.h"
#include "dispatch/select.h"
#include "reference/reference.h"
#include "tileattn/tileattn.h"
#if defined(TILEATTN_WITH_CUDA)
#include "cuda/cuda_api.h"
#endif

namespace tileattn {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

// t must be a view of like's shape on like's device (dtype checked by the caller).
void check_like(const char* name, const TensorRef& t, const char* like_name, const TensorRef& like) {
  if (t.rank != like.rank)
    throw Error(name, "rank " + str(t.rank) + " (shape " + shape_string(t) + "), expected " + str(like.rank) +
                          " dims as " + like_name);
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] != like.shape[d])
      throw Error(name,
                  "shape " + shape_string(t) + " differs from " + like_name + "'s " + shape_string(like));
    if (t.stride[d] < 0)
      throw Error(name, "stride " + str(t.stride[d]) + " in dim " + str(d) + " is negative");
  }
  if (t.numel() > 0 && t.data == nullptr) throw Error(name, "data is null for shape " + shape_string(t));
  if (t.device != like.device)
    throw Error(
        name, "is on " + device_name(t.device) + " but " + like_name + " is on " + device_name(like.device));
}

using detail::overlaps;
using detail::strides4;

// dlse: lse's shape ([batch, heads, seqlen_q], or [heads, total_q] for a packed q), on q's
// device, fp32 (any float dtype for the oracle).
void set_dlse(const TensorRef* dlse, const TensorRef& q, bool fp32_only, detail::BackwardParams* b) {
  if (!dlse) return;
  const bool packed = q.rank == 3;
  TensorRef like = *dlse;  // the shape dlse must have, for check_like
  like.rank = packed ? 2 : 3;
  if (packed)
    like.shape[0] = q.shape[1], like.shape[1] = q.shape[0];
  else
    like.shape[0] = q.shape[0], like.shape[1] = q.shape[2], like.shape[2] = q.shape[1];
  like.device = q.device;
  check_like("dlse", *dlse, "lse", like);
  if (dlse->dtype == DType::kInt32 || (fp32_only && dlse->dtype != DType::kFloat32))
    throw Error("dlse", std::string("dtype ") + dtype_name(dlse->dtype) + ", expected fp32 (as lse)");
  const auto& s = dlse->stride;
  b->dlse = dlse->data;
  b->dlse_dtype = dlse->dtype;
  b->dlse_stride = packed ? detail::Strides3{0, s[0], s[1]} : detail::Strides3{s[0], s[1], s[2]};
}

// The gradients: shaped like q, k, v, in `dtype` (or any float dtype for the oracle), disjoint
// from each other and from every input.
void check_grads(const TensorRef& dq, const TensorRef& dk, const TensorRef& dv, const TensorRef& q,
                 const TensorRef& k, const TensorRef& v,
                 std::initializer_list<std::pair<const char*, const TensorRef*>> inputs, const DType* dtype) {
  check_like("dq", dq, "q", q);
  check_like("dk", dk, "k", k);
  check_like("dv", dv, "v", v);
  for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    if (dtype && t->dtype != *dtype)
      throw Error(name,
                  std::string("dtype ") + dtype_name(t->dtype) + " differs from q's " + dtype_name(*dtype));
    if (!dtype && (t->dtype == DType::kInt32)) throw Error(name, "dtype int32 is not a floating-point dtype");
    for (auto [in_name, in] : inputs)
      if (in && overlaps(*t, *in)) throw Error(name, std::string("overlaps ") + in_name + " in memory");
  }
  if (overlaps(dq, dk) || overlaps(dq, dv)) throw Error("dq", "overlaps another gradient in memory");
  if (overlaps(dk, dv)) throw Error("dk", "overlaps dv in memory");
}

detail::BackwardParams prepare(const TensorRef& dout, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef& out, const TensorRef& lse,
                               const TensorRef& dq, const TensorRef& dk, const TensorRef& dv,
                               const Seqlens* seqlens, const Options& options, const TensorRef* dlse) {
  detail::BackwardParams b;
  if (auto e = detail::make_params(q, k, v, out, &lse, seqlens, options, detail::Entry::kForward, &b.fwd))
    throw *e;
  set_dlse(dlse, q, true, &b);
  check_like("dout", dout, "out", out);
  if (dout.dtype != q.dtype)
    throw Error("dout",
                std::string("dtype ") + dtype_name(dout.dtype) + " differs from q's " + dtype_name(q.dtype));
  check_grads(
      dq, dk, dv, q, k, v,
      {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}, {"dout", &dout}, {"dlse", dlse}},
      &q.dtype);
  if (seqlens)
    for (const TensorRef* t :
         {seqlens->cu_seqlens_q, seqlens->cu_seqlens_k, seqlens->seqused_q, seqlens->seqused_k})
      if (t)
        for (auto [name, g] : {std::pair<const char*, const TensorRef*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}})
          if (overlaps(*g, *t)) throw Error(name, "overlaps an index tensor in memory");
  b.dout = dout.data;
  b.dout_stride = strides4(dout);
  b.dq = dq.data, b.dk = dk.data, b.dv = dv.data;
  b.dq_stride = strides4(dq), b.dk_stride = strides4(dk), b.dv_stride = strides4(dv);
  b.grad_dtype = q.dtype;
  b.deterministic = options.deterministic;
  b.kernel = options.kernel;
  return b;
}

// The kernel backward() runs for b on its device (kCpuTiled, kCudaSm80 or kCudaSm90), or an Error
// naming the argument that rules every one out.
Kernel choose(const detail::BackwardParams& b, const Device& device) {
  if (device.kind == DeviceKind::kCPU) {
    if (b.kernel != Kernel::kAuto && b.kernel != Kernel::kCpuTiled)
      throw Error("options.kernel",
                  std::string(kernel_name(b.kernel)) + " runs on CUDA tensors, but q is on the CPU");
    return Kernel::kCpuTiled;
  }
  // CUDA tensors: the forward's checks of q, k, v, out (and the device; sm90's when the sm90
  // backward is asked for), then the backward's own.
  const Kernel requested =
      b.kernel == Kernel::kCpuTiled || b.kernel == Kernel::kCudaSm90 ? b.kernel : Kernel::kAuto;
  const detail::Selection sel = detail::select_kernel(b.fwd, detail::device_caps(device), requested);
  if (!sel.ok()) throw Error(sel.argument, sel.reason);
  if (const detail::Rejection r = detail::cuda_backward_rejects(b); !r.ok())
    throw Error(r.argument, r.reason);
  // The sm90 backward runs when asked for (Kernel::kCudaSm90) on a GPU and build that have it,
  // and by default where dispatch prefers it.
  if (b.kernel == Kernel::kCudaSm90) {
    if (sel.kernel != Kernel::kCudaSm90)
      throw Error("options.kernel", "the sm90 backward needs an sm_90 GPU and a build with sm90a kernels");
    if (const detail::Rejection r = detail::sm90_backward_rejects(b); !r.ok())
      throw Error(r.argument, r.reason);
  }
#if !defined(TILEATTN_WITH_CUDA) || !defined(TILEATTN_CUDA_BACKWARD)
  throw Error("q", "is on " + device_name(device) +
                       ", but this build of tileattn has no CUDA backward (configure with "
                       "-DTILEATTN_CUDA_BACKWARD=ON)");
#else
  const bool sm90 =
      b.kernel == Kernel::kCudaSm90 ||
      (b.kernel == Kernel::kAuto && sel.kernel == Kernel::kCudaSm90 && detail::sm90_backward_preferred(b));
  return sm90 ? Kernel::kCudaSm90 : Kernel::kCudaSm80;
#endif
}

void run(const detail::BackwardParams& b, const Device& device) {
  const Kernel kernel = choose(b, device);
  if (kernel == Kernel::kCpuTiled) {
    detail::cpu::backward(b);
    return;
  }
#if defined(TILEATTN_WITH_CUDA) && defined(TILEATTN_CUDA_BACKWARD)
  if (b.fwd.check_indices) {  // checked mode: device index tensors validated first
    detail::IndexFaultAt faults[2];
    detail::cuda::find_index_faults(b.fwd, faults);
    for (int side = 0; side < 2; ++side)
      if (auto e = detail::index_fault_error(faults[side], side == 0)) throw *e;
  }
  detail::cuda::backward(b, kernel == Kernel::kCudaSm90);
#endif
}

// The oracle's and eager's arguments: q, k, v and dout (no forward results), the gradients.
detail::BackwardParams prepare_baseline(const TensorRef& dout, const TensorRef& q, const TensorRef& k,
                                        const TensorRef& v, const TensorRef& dq, const TensorRef& dk,
                                        const TensorRef& dv, const Seqlens* seqlens, const Options& options,
                                        detail::Entry entry, const TensorRef* dlse) {
  detail::BackwardParams b;
  // dq stands in for forward's out (the same shape); the oracle computes O itself.
  if (auto e = detail::make_params(q, k, v, dq, nullptr, seqlens, options, entry, &b.fwd)) throw *e;
  b.fwd.out = nullptr;
  check_like("dout", dout, "q", q);
  if (entry == detail::Entry::kEager && dout.dtype != q.dtype)
    throw Error("dout",
                std::string("dtype ") + dtype_name(dout.dtype) + " differs from q's " + dtype_name(q.dtype));
  if (dout.dtype == DType::kInt32) throw Error("dout", "dtype int32 is not a floating-point dtype");
  check_grads(dq, dk, dv, q, k, v, {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}, {"dlse", dlse}},
              entry == detail::Entry::kEager ? &q.dtype : nullptr);
  if (dq.dtype != dk.dtype || dq.dtype != dv.dtype)
    throw Error("dk",
                std::string("dtype ") + dtype_name(dk.dtype) + " differs from dq's " + dtype_name(dq.dtype));
  b.dout = dout.data;
  b.dout_stride = strides4(dout);
  b.dq = dq.data, b.dk = dk.data, b.dv = dv.data;
  b.dq_stride = strides4(dq), b.dk_stride = strides4(dk), b.dv_stride = strides4(dv);
  b.grad_dtype = dq.dtype;
  b.fwd.out_dtype = dout.dtype;  // the oracle reads dout in its own dtype
  set_dlse(dlse, q, entry == detail::Entry::kEager, &b);
  return b;
}

}  // namespace

void backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
              const TensorRef& out, const TensorRef& lse, const TensorRef& dq, const TensorRef& dk,
              const TensorRef& dv, const Options& options, const TensorRef* dlse) {
  run(prepare(dout, q, k, v, out, lse, dq, dk, dv, nullptr, options, dlse), q.device);
}

Support supported_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                           const TensorRef& out, const TensorRef& lse, const TensorRef& dq,
                           const TensorRef& dk, const TensorRef& dv, const Options& options,
                           const TensorRef* dlse) {
  try {
    return Support{
        true, choose(prepare(dout, q, k, v, out, lse, dq, dk, dv, nullptr, options, dlse), q.device), {}};
  } catch (const Error& e) {
    return Support{false, Kernel::kAuto, e.what()};
  }
}

void backward_varlen(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                     const TensorRef& out, const TensorRef& lse, const TensorRef& dq, const TensorRef& dk,
                     const TensorRef& dv, const Seqlens& seqlens, const Options& options,
                     const TensorRef* dlse) {
  run(prepare(dout, q, k, v, out, lse, dq, dk, dv, &seqlens, options, dlse), q.device);
}

void reference_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                        const TensorRef& dq, const TensorRef& dk, const TensorRef& dv, const Options& options,
                        const TensorRef* dlse) {
  detail::reference::oracle_backward(
      prepare_baseline(dout, q, k, v, dq, dk, dv, nullptr, options, detail::Entry::kReference, dlse));
}

void reference_backward_varlen(const TensorRef& dout, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef& dq, const TensorRef& dk,
                               const TensorRef& dv, const Seqlens& seqlens, const Options& options,
                               const TensorRef* dlse) {
  detail::reference::oracle_backward(
      prepare_baseline(dout, q, k, v, dq, dk, dv, &seqlens, options, detail::Entry::kReference, dlse));
}

void eager_backward(const TensorRef& dout, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                    const TensorRef& dq, const TensorRef& dk, const TensorRef& dv, const Options& options,
                    const TensorRef* dlse) {
  if (q.device.kind != DeviceKind::kCPU)
    throw Error("q", "is on " + device_name(q.device) + "; eager_backward runs on CPU tensors only");
  detail::reference::eager_backward(
      prepare_baseline(dout, q, k, v, dq, dk, dv, nullptr, options, detail::Entry::kEager, dlse));
}

}  // namespace tileattn
