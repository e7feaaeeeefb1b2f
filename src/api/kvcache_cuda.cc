// kvcache_cuda.cc: forward_kvcache on CUDA tensors: the host-side checks done (kvcache_args.cc),
// the kernel selected before anything is written, the index values checked on the device in
// the checked mode, then the append and the attention on the stream (cuda/common/kvcache_append.cu).
// Nothing here reads device memory or syncs outside the checked mode.
#include <string>
#include <utility>

#include "api/device_caps.h"
#include "api/kvcache_args.h"
#include "api/validate.h"
#include "cuda/cuda_api.h"
#include "dispatch/select.h"

namespace tileattn::detail {
namespace {

const int32_t* ptr(const TensorRef* t) { return t ? static_cast<const int32_t*>(t->data) : nullptr; }

}  // namespace

void forward_kvcache_cuda(const KvPlan& plan, const TensorRef& q, const KvCache& c, const TensorRef& out,
                          const TensorRef* lse, const Options& options) {
  // The host cannot read the lengths: the capacity bounds every sequence's keys.
  if (plan.varlen_q && c.max_seqlen_q < 0)
    throw Error("max_seqlen_q", "is required with cu_seqlens_q on CUDA (the host cannot read it)");
  AttnParams p =
      kvcache_params(plan, q, c, out, lse, options, plan.capacity, ptr(c.page_table), ptr(c.cache_batch_idx));
  if (plan.paged) p.page_table_stride = c.page_table->shape[0] > 1 ? c.page_table->stride[0] : plan.max_pages;
  p.seqs.start_k = ptr(c.cache_leftpad);
  const Selection sel = select_kernel(p, device_caps(q.device), options.kernel);
  if (!sel.ok()) throw Error(sel.argument, sel.reason);

  cuda::KvAppend a;
  KvIndices& x = a.indices;
  x = plan.indices;
  x.seqlens = ptr(c.cache_seqlens), x.batch_idx = ptr(c.cache_batch_idx), x.leftpad = ptr(c.cache_leftpad);
  x.table = ptr(c.page_table), x.cu_new = ptr(c.cu_seqlens_k_new), x.cu_q = ptr(c.cu_seqlens_q);
  x.table_stride = p.page_table_stride;
  if (c.k_new) {
    a.k_new = c.k_new->data, a.v_new = c.v_new->data;
    a.k_new_stride = strides4(*c.k_new), a.v_new_stride = strides4(*c.v_new);
    // The append kernel reads rows of head_dim elements at stride 1.
    for (auto [name, s] :
         {std::pair<const char*, const Strides4*>{"k_new", &a.k_new_stride}, {"v_new", &a.v_new_stride}})
      if (s->d != 1 && plan.head_dim > 1)
        throw Error(name, "head_dim stride is " + std::to_string(s->d) + "; CUDA needs it to be 1");
  }
  if (c.rotary_cos) {
    a.cos = c.rotary_cos->data, a.sin = c.rotary_sin->data, a.rotary_dtype = c.rotary_cos->dtype;
    a.cos_stride[0] = c.rotary_cos->stride[0], a.cos_stride[1] = c.rotary_cos->stride[1];
    a.sin_stride[0] = c.rotary_sin->stride[0], a.sin_stride[1] = c.rotary_sin->stride[1];
    a.half = plan.rotary_half, a.interleaved = c.rotary_interleaved;
    if (c.rotary_sin->dtype != a.rotary_dtype)
      throw Error("rotary_sin", std::string("dtype ") + dtype_name(c.rotary_sin->dtype) +
                                    " differs from rotary_cos's " + dtype_name(a.rotary_dtype) + " on CUDA");
  }
  a.q_rows = plan.varlen_q ? q.shape[0] : plan.batch * q.shape[1];
  if (options.check_indices) {  // before anything is written
    IndexFaultAt q_fault;
    KvFault kv_fault;
    cuda::find_kvcache_faults(p, x, &q_fault, &kv_fault);
    if (auto e = index_fault_error(q_fault, true)) throw *e;
    if (auto e = kvcache_fault_error(kv_fault)) throw *e;
  }
  cuda::forward_kvcache(p, a, sel.kernel);
}

}  // namespace tileattn::detail
