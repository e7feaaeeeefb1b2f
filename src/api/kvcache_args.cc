// kvcache_args.cc: forward_kvcache's host-side checks (ranks, shapes, dtypes, devices,
// aliasing), the Errors of the index-value faults, and the AttnParams over the cache's layout.
#include "api/kvcache_args.h"

#include <string>
#include <utility>
#include <vector>

#include "api/validate.h"

namespace tileattn::detail {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

[[noreturn]] void fail(const std::string& argument, const std::string& message) {
  throw Error(argument, message);
}

void check(const std::optional<Error>& e) {
  if (e) throw *e;
}

using Named = std::pair<const char*, const TensorRef*>;

void same_device(const char* name, const TensorRef& t, const Device& device) {
  if (t.device != device)
    fail(name, "is on " + device_name(t.device) + " but q is on " + device_name(device));
}

// An int32 index tensor: rank, shape (-1: any) and device; on CUDA also contiguous (the device
// reads it as a flat array).
void check_index(const char* name, const TensorRef& t, std::vector<int64_t> shape, const Device& device) {
  const char* layout = shape.size() == 1 ? "[batch] (or [batch + 1])" : "[batch, max_pages]";
  check(check_rank(name, t, static_cast<int>(shape.size()), layout));
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] >= 0 && t.shape[d] != shape[d])
      fail(name, "shape " + shape_string(t) + ": dim " + str(static_cast<int64_t>(d)) + " is " +
                     str(t.shape[d]) + ", expected " + str(shape[d]));
  if (t.dtype != DType::kInt32) fail(name, std::string("dtype ") + dtype_name(t.dtype) + ", expected int32");
  same_device(name, t, device);
  const int last = t.rank - 1;
  if (device.kind == DeviceKind::kCUDA && t.shape[last] > 1 && t.stride[last] != 1)
    fail(name, "stride " + str(t.stride[last]) + " along its last dim, expected 1 on CUDA (contiguous)");
}

void check_pair(const TensorRef* a, const TensorRef* b, const char* a_name, const char* b_name) {
  if ((a == nullptr) != (b == nullptr)) fail(a ? b_name : a_name, "is required with the other");
}

void check_new(const KvCache& c, const TensorRef& q, KvPlan& plan) {
  check_pair(c.k_new, c.v_new, "k_new", "v_new");
  if (c.cu_seqlens_k_new && !c.k_new) fail("cu_seqlens_k_new", "is given without k_new");
  if (!c.k_new) return;
  const bool packed = c.cu_seqlens_k_new != nullptr;
  plan.packed_new = packed;
  for (auto [name, t] : {Named{"k_new", c.k_new}, {"v_new", c.v_new}}) {
    check(check_rank(name, *t, packed ? 3 : 4,
                     packed ? "[total_new, heads, head_dim]" : "[batch, seqlen_new, heads, head_dim]"));
    if (!packed && t->shape[0] != plan.batch)
      fail(name, "batch " + str(t->shape[0]) + ", expected " + str(plan.batch) + " as q");
    if (t->shape[t->rank - 2] != plan.heads_kv || t->shape[t->rank - 1] != plan.head_dim)
      fail(name, "shape " + shape_string(*t) + ": heads and head_dim must be k_cache's (" +
                     str(plan.heads_kv) + ", " + str(plan.head_dim) + ")");
    if (t->dtype != q.dtype)
      fail(name, std::string("dtype ") + dtype_name(t->dtype) + " differs from q's " + dtype_name(q.dtype));
    same_device(name, *t, q.device);
  }
  for (int d = 0; d < c.k_new->rank; ++d)
    if (c.v_new->shape[d] != c.k_new->shape[d])
      fail("v_new", "shape " + shape_string(*c.v_new) + " differs from k_new's " + shape_string(*c.k_new));
  if (packed) {
    check_index("cu_seqlens_k_new", *c.cu_seqlens_k_new, {plan.batch + 1}, q.device);
    plan.indices.new_rows = c.k_new->shape[0];
  } else {
    plan.indices.new_len = c.k_new->shape[1];
  }
}

void check_rotary(const KvCache& c, const TensorRef& q, KvPlan& plan) {
  check_pair(c.rotary_cos, c.rotary_sin, "rotary_cos", "rotary_sin");
  if (!c.rotary_cos) return;
  if (!c.k_new) fail("rotary_cos", "needs k_new (rotary is applied to the new keys and to q)");
  for (auto [name, t] : {Named{"rotary_cos", c.rotary_cos}, {"rotary_sin", c.rotary_sin}}) {
    check(check_rank(name, *t, 2, "[seqlen_ro, rotary_dim / 2]"));
    if (t->dtype != q.dtype && t->dtype != DType::kFloat32)
      fail(name, std::string("dtype ") + dtype_name(t->dtype) + ", expected q's (" + dtype_name(q.dtype) +
                     ") or fp32");
    same_device(name, *t, q.device);
    if (t->shape[0] != c.rotary_cos->shape[0] || t->shape[1] != c.rotary_cos->shape[1])
      fail(name, "shape " + shape_string(*t) + " differs from rotary_cos's " + shape_string(*c.rotary_cos));
  }
  plan.rotary_half = c.rotary_cos->shape[1];
  if (plan.rotary_half < 1 || 2 * plan.rotary_half > plan.head_dim)
    fail("rotary_cos", "rotary_dim / 2 is " + str(plan.rotary_half) + ", expected 1.." +
                           str(plan.head_dim / 2) + " (head_dim " + str(plan.head_dim) + ")");
  plan.indices.rotary_rows = c.rotary_cos->shape[0];
}

// Outputs and in-place writes never alias anything they are computed from.
void check_aliasing(const TensorRef& q, const KvCache& c, const TensorRef& out, const TensorRef* lse) {
  const Named read_only[] = {{"q", &q},
                             {"k_new", c.k_new},
                             {"v_new", c.v_new},
                             {"rotary_cos", c.rotary_cos},
                             {"rotary_sin", c.rotary_sin},
                             {"page_table", c.page_table},
                             {"cache_seqlens", c.cache_seqlens},
                             {"cache_batch_idx", c.cache_batch_idx},
                             {"cache_leftpad", c.cache_leftpad},
                             {"cu_seqlens_q", c.cu_seqlens_q},
                             {"cu_seqlens_k_new", c.cu_seqlens_k_new}};
  for (auto [name, t] :
       {Named{"out", &out}, {"lse", lse}, {"k_cache", &c.k_cache}, {"v_cache", &c.v_cache}}) {
    if (!t) continue;
    for (auto [read_name, r] : read_only)
      if (r && overlaps(*t, *r)) fail(name, std::string("overlaps ") + read_name + " in memory");
  }
  for (auto [name, t] : {Named{"out", &out}, {"lse", lse}})
    if (t && (overlaps(*t, c.k_cache) || overlaps(*t, c.v_cache)))
      fail(name, "overlaps the KV cache in memory");
  if (c.k_new && overlaps(c.k_cache, c.v_cache)) fail("v_cache", "overlaps k_cache in memory");
  if (c.k_new && (self_overlapping(c.k_cache) || self_overlapping(c.v_cache)))
    fail("k_cache", "strides overlap (an appended element would alias another)");
}

}  // namespace

KvPlan plan_kvcache(const TensorRef& q, const KvCache& c, const TensorRef& out, const TensorRef* lse,
                    const Options& options) {
  KvPlan plan;
  const Device dev = q.device;
  plan.varlen_q = c.cu_seqlens_q != nullptr, plan.paged = c.page_table != nullptr;
  check(check_rank("q", q, plan.varlen_q ? 3 : 4,
                   plan.varlen_q ? "[total_q, heads, head_dim]" : "[batch, seqlen, heads, head_dim]"));
  check(check_rank(
      "k_cache", c.k_cache, 4,
      plan.paged ? "[num_pages, page_size, heads, head_dim]" : "[batch, seqlen, heads, head_dim]"));
  check(check_rank("v_cache", c.v_cache, 4, "like k_cache"));
  const int64_t D = q.shape[q.rank - 1];
  plan.head_dim = D, plan.heads_q = q.shape[q.rank - 2], plan.heads_kv = c.k_cache.shape[2];
  for (int d = 0; d < 4; ++d)
    if (c.v_cache.shape[d] != c.k_cache.shape[d])
      fail("v_cache",
           "shape " + shape_string(c.v_cache) + " differs from k_cache's " + shape_string(c.k_cache));
  if (c.k_cache.shape[3] != D)
    fail("k_cache", "head_dim " + str(c.k_cache.shape[3]) + " differs from q's " + str(D));
  for (auto [name, t] : {Named{"k_cache", &c.k_cache}, {"v_cache", &c.v_cache}}) {
    if (t->dtype != q.dtype)
      fail(name, std::string("dtype ") + dtype_name(t->dtype) + " differs from q's " + dtype_name(q.dtype));
    same_device(name, *t, dev);
  }
  if (dev.kind != DeviceKind::kCPU && dev.kind != DeviceKind::kCUDA)
    fail("q", "is on " + device_name(dev) + "; forward_kvcache runs on CPU and CUDA tensors");

  // The batch and the cache's geometry.
  plan.batch = q.shape[0];
  if (plan.varlen_q) {
    check(check_rank("cu_seqlens_q", *c.cu_seqlens_q, 1, "[batch + 1]"));
    plan.batch = c.cu_seqlens_q->shape[0] - 1;
    if (plan.batch < 0) fail("cu_seqlens_q", "has no entries, expected batch + 1 >= 1");
    check_index("cu_seqlens_q", *c.cu_seqlens_q, {plan.batch + 1}, dev);
  }
  const int64_t B = plan.batch;
  plan.page_size = c.k_cache.shape[1], plan.capacity = plan.page_size;
  if (plan.paged) {
    if (c.cache_batch_idx)
      fail("cache_batch_idx", "is for a contiguous cache; a paged one maps pages instead");
    check_index("page_table", *c.page_table, {B, -1}, dev);
    plan.max_pages = c.page_table->shape[1];
    plan.capacity = plan.max_pages * plan.page_size;
    if (!c.cache_seqlens) fail("cache_seqlens", "is required with page_table");
  }
  if (c.cache_seqlens) check_index("cache_seqlens", *c.cache_seqlens, {B}, dev);
  if (c.cache_batch_idx) check_index("cache_batch_idx", *c.cache_batch_idx, {B}, dev);
  if (c.cache_leftpad) check_index("cache_leftpad", *c.cache_leftpad, {B}, dev);
  if (!plan.paged && !c.cache_batch_idx && B > c.k_cache.shape[0])
    fail("k_cache", "has " + str(c.k_cache.shape[0]) + " cache rows for a batch of " + str(B));

  check_new(c, q, plan);
  plan.positional_q = options.causal || options.window_left >= 0 || options.window_right >= 0;
  check_rotary(c, q, plan);
  // Without cache_seqlens every sequence is full; new keys would go past it. The CPU finds that
  // in the values; CUDA says so here, where a device fault could not be reported unchecked.
  const int64_t new_rows = !c.k_new ? 0 : plan.packed_new ? c.k_new->shape[0] : c.k_new->shape[1];
  if (dev.kind == DeviceKind::kCUDA && !c.cache_seqlens && new_rows > 0)
    fail("cache_seqlens", "is required with k_new on CUDA (without it every sequence holds " +
                              str(plan.capacity) + " keys, the cache's capacity)");
  check_aliasing(q, c, out, lse);

  KvIndices& x = plan.indices;
  x.batch = B, x.capacity = plan.capacity, x.page_size = plan.page_size, x.table_stride = plan.max_pages;
  x.cache_rows = c.k_cache.shape[0];
  x.len_q = plan.varlen_q ? 0 : q.shape[1];
  x.positional_q = plan.positional_q;
  return plan;
}

std::optional<Error> kvcache_fault_error(const KvFault& f) {
  const std::string b = str(f.b);
  switch (f.code) {
    case kKvFaultNone:
      return std::nullopt;
    case kKvFaultNewFirst:
      return Error("cu_seqlens_k_new", "entry 0 is " + str(f.value) + ", expected 0");
    case kKvFaultNewDecreases:
      return Error("cu_seqlens_k_new",
                   "entry " + b + " is " + str(f.value) + ", below entry " + str(f.b - 1));
    case kKvFaultNewLast:
      return Error("cu_seqlens_k_new",
                   "ends at " + str(f.value) + ", but k_new has " + str(f.limit) + " rows");
    case kKvFaultSeqlen:
      return Error("cache_seqlens", "entry " + b + " is " + str(f.value) + ", outside 0.." + str(f.limit));
    case kKvFaultCapacity:
      return Error("k_new", "sequence " + b + " has " + str(f.value) + " cached + " + str(f.extra) +
                                " new keys, past the cache's capacity of " + str(f.limit));
    case kKvFaultLeftpad:
      return Error("cache_leftpad", "entry " + b + " is " + str(f.value) + ", outside 0..cache_seqlens[" + b +
                                        "] = " + str(f.limit));
    case kKvFaultBatchIdx:
      return Error("cache_batch_idx", "entry " + b + " is " + str(f.value) + ", outside 0.." + str(f.limit));
    case kKvFaultPage:
      return Error("page_table",
                   "entry [" + b + ", " + str(f.j) + "] is " + str(f.value) + ", outside 0.." + str(f.limit));
    case kKvFaultRotary:
      return Error("rotary_cos",
                   "has " + str(f.limit) + " positions, but position " + str(f.value) + " is needed");
    default:
      return Error("cache_seqlens", "an index fault of unknown code " + str(f.code));
  }
}

AttnParams kvcache_params(const KvPlan& plan, const TensorRef& q, const KvCache& c, const TensorRef& out,
                          const TensorRef* lse, const Options& options, int64_t max_k, const int32_t* table,
                          const int32_t* batch_idx) {
  // A stand-in for the keys of the cache's shape (the cache's own layout replaces it below).
  TensorRef keys = c.k_cache;
  keys.shape = {plan.batch, max_k, plan.heads_kv, plan.head_dim, 0};
  keys.stride = {0, 0, 0, 1, 0};
  Seqlens seq;
  seq.cu_seqlens_q = c.cu_seqlens_q;
  seq.max_seqlen_q = c.max_seqlen_q;
  AttnParams p;
  check(make_params(q, keys, keys, out, lse, plan.varlen_q ? &seq : nullptr, options, Entry::kForward, &p));
  p.k = c.k_cache.data, p.v = c.v_cache.data;
  p.k_stride = strides4(c.k_cache), p.v_stride = strides4(c.v_cache);
  p.page_table = plan.paged ? table : nullptr;
  p.page_size = plan.page_size, p.page_table_stride = plan.max_pages;
  p.cache_rows = c.k_cache.shape[0];
  p.kv_batch_idx = batch_idx;
  p.seqs.max_k = max_k;
  p.seqlen_k = max_k;
  return p;
}

}  // namespace tileattn::detail
