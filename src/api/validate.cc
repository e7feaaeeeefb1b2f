// validate.cc: argument checks for every entry point; each message names argument and value.
#include "api/validate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

namespace tileattn::detail {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

std::string fstr(float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
  return buf;
}

}  // namespace

std::optional<Error> check_rank(const char* name, const TensorRef& t, int rank, const char* layout) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return Error(name, "rank " + str(t.rank) + " is outside 0.." + str(kMaxRank) + ", expected " + str(rank) +
                           " dims " + layout);
  if (t.rank != rank)
    return Error(name, "rank " + str(t.rank) + " (shape " + shape_string(t) + "), expected " + str(rank) +
                           " dims " + layout);
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] < 0)
      return Error(name, "shape " + shape_string(t) + " has a negative size in dim " + str(d));
    if (t.stride[d] < 0)
      return Error(name,
                   "stride " + str(t.stride[d]) + " in dim " + str(d) + " is negative; strides must be >= 0");
  }
  // The view's extent in elements must fit int64 (and so every offset computed from it).
  int64_t extent = 0, count = 1;
  for (int d = 0; d < rank; ++d)
    if (t.shape[d] == 0) return std::nullopt;  // empty: nothing is addressed
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] > (int64_t{1} << 60) / count)
      return Error(name, "shape " + shape_string(t) + " has more than 2^60 elements");
    count *= t.shape[d];
    const int64_t span = t.shape[d] - 1;
    if (span > 0 && t.stride[d] > (INT64_MAX / 8 - extent) / span)
      return Error(name, "stride " + str(t.stride[d]) + " in dim " + str(d) + " with size " +
                             str(t.shape[d]) + " addresses past 2^60 elements");
    extent += span * t.stride[d];
  }
  if (t.numel() > 0 && t.data == nullptr) return Error(name, "data is null for shape " + shape_string(t));
  return std::nullopt;
}

namespace {

// The element span [lo, hi] (in bytes from data) the view touches; empty views touch nothing.
struct Span {
  uintptr_t lo = 0, hi = 0;
  bool empty = true;
};

Span span_of(const TensorRef& t) {
  Span s;
  if (t.numel() == 0) return s;
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.stride[d];
  s.lo = reinterpret_cast<uintptr_t>(t.data);
  s.hi = s.lo + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(dtype_size(t.dtype))) - 1;
  s.empty = false;
  return s;
}

}  // namespace

Strides4 strides4(const TensorRef& t) {
  return t.rank == 4 ? Strides4{t.stride[0], t.stride[1], t.stride[2], t.stride[3]}
                     : Strides4{0, t.stride[0], t.stride[1], t.stride[2]};
}

bool overlaps(const TensorRef& a, const TensorRef& b) {
  const Span x = span_of(a), y = span_of(b);
  if (x.empty || y.empty || a.device != b.device) return false;
  return x.lo <= y.hi && y.lo <= x.hi;
}

// An output's elements must not share memory: sorted by stride, each dim steps past the last.
bool self_overlapping(const TensorRef& t) {
  if (t.numel() == 0) return false;  // an empty view writes nothing
  std::array<int, kMaxRank> order{};
  int n = 0;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > 1) order[n++] = d;
  for (int i = 1; i < n; ++i)  // insertion sort by stride
    for (int j = i; j > 0 && t.stride[order[j]] < t.stride[order[j - 1]]; --j)
      std::swap(order[j], order[j - 1]);
  int64_t extent = 1;  // elements spanned by the dims so far
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    if (t.stride[d] < extent) return true;
    extent = t.stride[d] * (t.shape[d] - 1) + extent;
  }
  return false;
}

namespace {

std::optional<Error> check_dim(const char* name, const TensorRef& t, int dim, const char* dim_name,
                               int64_t expected, const char* source) {
  if (t.shape[dim] != expected)
    return Error(name, "shape " + shape_string(t) + ": " + dim_name + " (dim " + str(dim) + ") is " +
                           str(t.shape[dim]) + ", expected " + str(expected) + " as in " + source);
  return std::nullopt;
}

}  // namespace

std::optional<Error> make_params(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                 const TensorRef& out, const TensorRef* lse, const Seqlens* seqlens,
                                 const Options& options, Entry entry, AttnParams* p) {
  // Packed (varlen) q / k drop the batch dim: [total, heads, head_dim].
  const bool vq = seqlens && seqlens->cu_seqlens_q, vk = seqlens && seqlens->cu_seqlens_k;
  const char* layout_q = vq ? "[total_q, heads, head_dim]" : "[batch, seqlen, heads, head_dim]";
  const char* layout_k = vk ? "[total_k, heads, head_dim]" : "[batch, seqlen, heads, head_dim]";
  const int rq = vq ? 3 : 4, rk = vk ? 3 : 4;
  for (auto [name, t, rank, layout] :
       {std::tuple<const char*, const TensorRef*, int, const char*>{"q", &q, rq, layout_q},
        {"k", &k, rk, layout_k},
        {"v", &v, rk, layout_k},
        {"out", &out, rq, layout_q}})
    if (auto e = check_rank(name, *t, rank, layout)) return e;
  if (lse)
    if (auto e = check_rank("lse", *lse, rq - 1, vq ? "[heads, total_q]" : "[batch, heads, seqlen_q]"))
      return e;

  // Shapes. Dims counted from the end are the same in both layouts.
  const int64_t D = q.shape[rq - 1], Hq = q.shape[rq - 2], Hkv = k.shape[rk - 2];
  if (D < 1) return Error("q", "head_dim (dim " + str(rq - 1) + ") is " + str(D) + ", expected >= 1");
  if (Hq < 1) return Error("q", "heads (dim " + str(rq - 2) + ") is " + str(Hq) + ", expected >= 1");
  if (Hkv < 1) return Error("k", "heads (dim " + str(rk - 2) + ") is " + str(Hkv) + ", expected >= 1");
  const char* names4[] = {"batch", "seqlen", "heads", "head_dim"};
  const char* names3[] = {"total", "heads", "head_dim"};
  auto dim_name = [&](int rank, int d) { return rank == 4 ? names4[d] : names3[d]; };
  if (auto e = check_dim("k", k, rk - 1, "head_dim", D, "q")) return e;
  // The index tensors and the batch they describe.
  SeqlensView index;
  int64_t B = vq ? -1 : q.shape[0];
  if (seqlens) {
    if (auto e = check_seqlens(*seqlens, q, k, &B, &index)) return e;
  } else {
    if (auto e = check_dim("k", k, 0, "batch", B, "q")) return e;
    index.seqs.max_q = q.shape[1];
    index.seqs.max_k = k.shape[1];
  }
  for (int d = 0; d < rk; ++d)
    if (auto e = check_dim("v", v, d, dim_name(rk, d), k.shape[d], "k")) return e;
  for (int d = 0; d < rq; ++d)
    if (auto e = check_dim("out", out, d, dim_name(rq, d), q.shape[d], "q")) return e;
  if (Hq % Hkv != 0)
    return Error("k", "heads (dim " + str(rk - 2) + ") is " + str(Hkv) +
                          ", which does not divide the query heads " + str(Hq) +
                          " (GQA needs Hq % Hkv == 0)");

  if (lse) {
    if (vq) {
      if (auto e = check_dim("lse", *lse, 0, "heads", Hq, "q")) return e;
      if (auto e = check_dim("lse", *lse, 1, "total_q", q.shape[0], "q")) return e;
    } else {
      if (auto e = check_dim("lse", *lse, 0, "batch", B, "q")) return e;
      if (auto e = check_dim("lse", *lse, 1, "heads", Hq, "q")) return e;
      if (auto e = check_dim("lse", *lse, 2, "seqlen_q", q.shape[1], "q")) return e;
    }
  }

  // Dtypes.
  if (q.dtype == DType::kInt32)
    return Error("q", "dtype int32 is not supported; expected fp32, fp16 or bf16");
  if (k.dtype != q.dtype)
    return Error("k",
                 std::string("dtype ") + dtype_name(k.dtype) + " differs from q's " + dtype_name(q.dtype));
  if (v.dtype != q.dtype)
    return Error("v",
                 std::string("dtype ") + dtype_name(v.dtype) + " differs from q's " + dtype_name(q.dtype));
  if (entry != Entry::kReference) {
    if (q.dtype == DType::kFloat64)
      return Error("q", "dtype fp64 is accepted only by reference(); expected fp32, fp16 or bf16");
    if (out.dtype != q.dtype)
      return Error(
          "out", std::string("dtype ") + dtype_name(out.dtype) + " differs from q's " + dtype_name(q.dtype));
    if (lse && lse->dtype != DType::kFloat32)
      return Error("lse", std::string("dtype ") + dtype_name(lse->dtype) + ", expected fp32");
  } else if (out.dtype == DType::kInt32 || (lse && lse->dtype == DType::kInt32)) {
    return Error(out.dtype == DType::kInt32 ? "out" : "lse", "dtype int32 is not a floating-point dtype");
  }

  // Devices.
  for (auto [name, t] :
       {std::pair<const char*, const TensorRef*>{"k", &k}, {"v", &v}, {"out", &out}, {"lse", lse}})
    if (t && t->device != q.device)
      return Error(name, "is on " + device_name(t->device) + " but q is on " + device_name(q.device));
  if (q.device.kind == DeviceKind::kCUDA && q.device.index < 0)
    return Error("q", "device index " + str(q.device.index) + " is negative");
  if (entry == Entry::kReference && q.device.kind != DeviceKind::kCPU)
    return Error("q", "is on " + device_name(q.device) + "; reference() runs on CPU tensors only");
  for (const auto& [name, t] : index.tensors)
    if (t->device != q.device)
      return Error(name, "is on " + device_name(t->device) + " but q is on " + device_name(q.device));

  // Outputs must not overlap themselves, the inputs, or the index tensors.
  if (self_overlapping(out)) return Error("out", "strides overlap (a written element would alias another)");
  if (lse && self_overlapping(*lse))
    return Error("lse", "strides overlap (a written element would alias another)");
  const auto overlap_error = [&](const std::string& name, const TensorRef& t) -> std::optional<Error> {
    if (overlaps(out, t)) return Error("out", "overlaps " + name + " in memory");
    if (lse && overlaps(*lse, t)) return Error("lse", "overlaps " + name + " in memory");
    return std::nullopt;
  };
  for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"q", &q}, {"k", &k}, {"v", &v}})
    if (auto e = overlap_error(name, *t)) return e;
  for (const auto& [name, t] : index.tensors)
    if (auto e = overlap_error(name, *t)) return e;
  if (lse && overlaps(*lse, out)) return Error("lse", "overlaps out in memory");

  // Options.
  if (options.scale && !std::isfinite(*options.scale))
    return Error("options.scale", fstr(*options.scale) + " is not finite");
  if (!(options.softcap >= 0.0f) || !std::isfinite(options.softcap))
    return Error("options.softcap", fstr(options.softcap) + ", expected a finite value >= 0 (0 = off)");
  if (options.window_left < -1)
    return Error("options.window_left", str(options.window_left) + ", expected >= 0 or -1 (unbounded)");
  if (options.window_right < -1)
    return Error("options.window_right", str(options.window_right) + ", expected >= 0 or -1 (unbounded)");
  if (options.causal && options.window_right > 0)
    return Error("options.window_right",
                 str(options.window_right) + " conflicts with causal, which sets it to 0");
  constexpr int kMaxThreads = 1024;
  if (options.num_threads < 0 || options.num_threads > kMaxThreads)
    return Error("options.num_threads",
                 str(options.num_threads) + ", expected 0 (the default) to " + str(kMaxThreads));
  if (options.num_splits < 0 || options.num_splits > kMaxSplits)
    return Error("options.num_splits",
                 str(options.num_splits) + ", expected 0 (chosen per problem) to " + str(kMaxSplits));

  // The index tensors' values, where the host can read them (CUDA: checked mode, on the device).
  if (q.device.kind == DeviceKind::kCPU && seqlens)
    if (auto e = check_seqlens_values(index, q, k)) return e;

  AttnParams& P = *p;
  P = AttnParams{};
  P.q = q.data;
  P.k = k.data;
  P.v = v.data;
  P.out = out.data;
  P.lse = lse ? lse->data : nullptr;
  P.dtype = q.dtype;
  P.out_dtype = out.dtype;
  P.lse_dtype = lse ? lse->dtype : DType::kFloat32;
  P.device_index = q.device.index;
  P.batch = B;
  P.heads_q = Hq;
  P.heads_kv = Hkv;
  P.head_dim = D;
  // A packed tensor is a dense one with batch stride 0, its rows offset per sequence.
  P.q_stride = strides4(q);
  P.k_stride = strides4(k);
  P.v_stride = strides4(v);
  P.out_stride = strides4(out);
  if (lse)
    P.lse_stride = vq ? Strides3{0, lse->stride[0], lse->stride[1]}
                      : Strides3{lse->stride[0], lse->stride[1], lse->stride[2]};
  P.seqs = index.seqs;
  P.seqlen_q = P.seqs.max_q;
  P.seqlen_k = P.seqs.max_k;
  P.total_q = vq ? q.shape[0] : 0;
  P.total_k = vk ? k.shape[0] : 0;
  P.scale = options.scale ? *options.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  P.softcap = options.softcap;
  // A window reaching past every key is no window; normalizing it here also keeps the mask
  // arithmetic (i + (Lk - Lq) +- window) far from int64 overflow.
  const int64_t Lq = P.seqlen_q, Lk = P.seqlen_k;
  auto unbounded_past = [&](int64_t w) { return w > Lq + Lk ? -1 : w; };
  P.window_left = unbounded_past(options.window_left);
  P.window_right = options.causal ? 0 : unbounded_past(options.window_right);
  P.rescale = options.rescale;
  P.num_threads = options.num_threads;
  P.num_splits = options.num_splits;
  P.check_indices = options.check_indices;
  P.cuda_stream = options.cuda_stream;
  return std::nullopt;
}

}  // namespace tileattn::detail
