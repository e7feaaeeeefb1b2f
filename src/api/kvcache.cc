// kvcache.cc: forward_kvcache: the arguments checked on the host (kvcache_args.cc); on the CPU
// the index values read and checked, then the new keys and values appended in place (rotary
// first), then attention over the cache through the forward kernel with the cache's layout
// (params.h: kv_offset). CUDA tensors go to kvcache_cuda.cc.
#include <algorithm>
#include <vector>

#include "api/kvcache_args.h"
#include "api/validate.h"
#include "common/convert.h"
#include "cpu/cpu_forward.h"
#include "tileattn/tileattn.h"

namespace tileattn {
namespace detail {
#if defined(TILEATTN_WITH_CUDA)
void forward_kvcache_cuda(const KvPlan& plan, const TensorRef& q, const KvCache& c, const TensorRef& out,
                          const TensorRef* lse, const Options& options);
#endif
}  // namespace detail

namespace {

using detail::AttnParams;
using detail::Strides4;

// An int32 index tensor's values (row-major); its rank, shape and dtype are already checked.
std::vector<int32_t> read_index(const TensorRef* t) {
  if (!t) return {};
  std::vector<int32_t> values(t->numel());
  const auto* data = static_cast<const int32_t*>(t->data);
  for (int64_t i = 0; i < t->numel(); ++i)
    values[i] = t->rank == 1 ? data[i * t->stride[0]]
                             : data[(i / t->shape[1]) * t->stride[0] + (i % t->shape[1]) * t->stride[1]];
  return values;
}

const int32_t* ptr(const std::vector<int32_t>& v, const TensorRef* t) { return t ? v.data() : nullptr; }

// Rotates the first 2 * half dims of row x (D elements of `dtype` at stride sd) at position pos
// by cos/sin [seqlen_ro, half], into dst (same layout, may be x). In double, rounded once to fp32
// and then to the dtype (store_from_double); the CUDA append computes the same.
struct Rotary {
  const TensorRef *cos = nullptr, *sin = nullptr;
  bool interleaved = true;
  int64_t half = 0;

  double at(const TensorRef* t, int64_t pos, int64_t i) const {
    return detail::load_as_double(t->data, t->dtype, pos * t->stride[0] + i * t->stride[1]);
  }
  void apply(const void* x, int64_t x_off, int64_t sd, void* dst, int64_t dst_off, int64_t dsd, DType dtype,
             int64_t D, int64_t pos) const {
    std::vector<double> row(D);
    for (int64_t d = 0; d < D; ++d) row[d] = detail::load_as_double(x, dtype, x_off + d * sd);
    for (int64_t i = 0; i < half && cos; ++i) {
      const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
      const double c = at(cos, pos, i), s = at(sin, pos, i), x1 = row[a], x2 = row[b];
      row[a] = x1 * c - x2 * s;
      row[b] = x2 * c + x1 * s;
    }
    for (int64_t d = 0; d < D; ++d) detail::store_from_double(dst, dtype, dst_off + d * dsd, row[d]);
  }
};

void forward_kvcache_cpu(detail::KvPlan plan, const TensorRef& q, const KvCache& c, const TensorRef& out,
                         const TensorRef* lse, const Options& options) {
  const int64_t B = plan.batch, Hq = plan.heads_q, Hkv = plan.heads_kv, D = plan.head_dim;
  const std::vector<int32_t> cu_q = read_index(c.cu_seqlens_q), table = read_index(c.page_table),
                             seqlens = read_index(c.cache_seqlens), batch_idx = read_index(c.cache_batch_idx),
                             leftpad = read_index(c.cache_leftpad), cu_new = read_index(c.cu_seqlens_k_new);
  detail::KvIndices& x = plan.indices;
  x.seqlens = ptr(seqlens, c.cache_seqlens), x.batch_idx = ptr(batch_idx, c.cache_batch_idx);
  x.leftpad = ptr(leftpad, c.cache_leftpad), x.table = ptr(table, c.page_table);
  x.cu_new = ptr(cu_new, c.cu_seqlens_k_new), x.cu_q = ptr(cu_q, c.cu_seqlens_q);
  if (auto e = detail::kvcache_fault_error(detail::find_kvcache_fault(x))) throw *e;

  std::vector<int32_t> total(B);
  int64_t max_total = 0;
  for (int64_t b = 0; b < B; ++b) {
    total[b] = static_cast<int32_t>(x.seqlen(b) + x.new_keys(b));
    max_total = std::max<int64_t>(max_total, total[b]);
  }
  AttnParams p = detail::kvcache_params(plan, q, c, out, lse, options, max_total, ptr(table, c.page_table),
                                        ptr(batch_idx, c.cache_batch_idx));

  // Append: the new rows (rotated) at positions cache_seqlens[b] + i.
  Rotary rot;
  rot.interleaved = c.rotary_interleaved;
  if (c.rotary_cos) rot.cos = c.rotary_cos, rot.sin = c.rotary_sin, rot.half = plan.rotary_half;
  if (c.k_new) {
    const Strides4 ks = detail::strides4(*c.k_new), vs = detail::strides4(*c.v_new);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < x.new_keys(b); ++i)
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t pos = x.seqlen(b) + i, r = x.cu_new ? x.cu_new[b] + i : i;
          rot.apply(c.k_new->data, b * ks.b + r * ks.l + h * ks.h, ks.d, c.k_cache.data,
                    detail::kv_offset(p, p.k_stride, b, pos, h), p.k_stride.d, q.dtype, D, pos);
          Rotary{}.apply(c.v_new->data, b * vs.b + r * vs.l + h * vs.h, vs.d, c.v_cache.data,
                         detail::kv_offset(p, p.v_stride, b, pos, h), p.v_stride.d, q.dtype, D, pos);
        }
  }
  // q rotated into a contiguous copy (q itself is the caller's).
  std::vector<char> q_rot;
  if (rot.cos) {
    q_rot.resize(static_cast<size_t>(q.numel() * static_cast<int64_t>(dtype_size(q.dtype))));
    const Strides4 qs = detail::strides4(q);
    const Strides4 rs =
        plan.varlen_q ? Strides4{0, Hq * D, D, 1} : Strides4{q.shape[1] * Hq * D, Hq * D, D, 1};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < x.queries(b); ++i)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t row = plan.varlen_q ? cu_q[b] + i : i,
                        pos = x.seqlen(b) + (plan.positional_q ? i : 0);
          rot.apply(q.data, b * qs.b + row * qs.l + h * qs.h, qs.d, q_rot.data(),
                    b * rs.b + row * rs.l + h * rs.h, 1, q.dtype, D, pos);
        }
    p.q = q_rot.data(), p.q_stride = rs;
  }
  // Attention over positions [leftpad, total) of each sequence's cache.
  p.seqs.used_k = total.data();
  p.seqs.start_k = ptr(leftpad, c.cache_leftpad);
  detail::cpu::forward(p);
}

}  // namespace

void forward_kvcache(const TensorRef& q, const KvCache& c, const TensorRef& out, const TensorRef* lse,
                     const Options& options) {
  const detail::KvPlan plan = detail::plan_kvcache(q, c, out, lse, options);
  if (q.device.kind == DeviceKind::kCPU) {
    if (options.kernel != Kernel::kAuto && options.kernel != Kernel::kCpuTiled)
      throw Error("options.kernel",
                  std::string(kernel_name(options.kernel)) + " runs on CUDA tensors, but q is on the CPU");
    forward_kvcache_cpu(plan, q, c, out, lse, options);
    return;
  }
#if defined(TILEATTN_WITH_CUDA)
  detail::forward_kvcache_cuda(plan, q, c, out, lse, options);
#else
  throw Error("q", "is on " + device_name(q.device) + ", but this build of tileattn has no CUDA kernels");
#endif
}

}  // namespace tileattn
