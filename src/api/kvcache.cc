// kvcache.cc: forward_kvcache: every argument and index value checked, then the new keys and
// values appended in place (rotary first), then attention over the cache through the forward
// kernel with the cache's layout (params.h: kv_offset).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "api/validate.h"
#include "common/convert.h"
#include "cpu/cpu_forward.h"
#include "tileattn/tileattn.h"

namespace tileattn {
namespace {

using detail::AttnParams;
using detail::Strides4;

std::string str(int64_t x) { return std::to_string(x); }

[[noreturn]] void fail(const std::string& argument, const std::string& message) {
  throw Error(argument, message);
}

void check(const std::optional<Error>& e) {
  if (e) throw *e;
}

// An int32 index tensor's values (row-major), checked for rank, shape, dtype and device.
std::vector<int32_t> read_index(const char* name, const TensorRef& t, std::vector<int64_t> shape,
                                const Device& device) {
  const char* layout = shape.size() == 1 ? "[batch] (or [batch + 1])" : "[batch, max_pages]";
  check(detail::check_rank(name, t, static_cast<int>(shape.size()), layout));
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] >= 0 && t.shape[d] != shape[d])
      fail(name, "shape " + shape_string(t) + ": dim " + str(static_cast<int64_t>(d)) + " is " +
                     str(t.shape[d]) + ", expected " + str(shape[d]));
  if (t.dtype != DType::kInt32) fail(name, std::string("dtype ") + dtype_name(t.dtype) + ", expected int32");
  if (t.device != device)
    fail(name, "is on " + device_name(t.device) + " but q is on " + device_name(device));
  std::vector<int32_t> values(t.numel());
  const auto* data = static_cast<const int32_t*>(t.data);
  for (int64_t i = 0; i < t.numel(); ++i)
    values[i] = t.rank == 1 ? data[i * t.stride[0]]
                            : data[(i / t.shape[1]) * t.stride[0] + (i % t.shape[1]) * t.stride[1]];
  return values;
}

Strides4 strides4(const TensorRef& t) {
  return t.rank == 4 ? Strides4{t.stride[0], t.stride[1], t.stride[2], t.stride[3]}
                     : Strides4{0, t.stride[0], t.stride[1], t.stride[2]};
}

// Rotates the first 2 * half dims of row x (D elements of `dtype` at stride 1 * sd) at position
// pos by cos/sin [seqlen_ro, half], into dst (same layout, may be x).
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

}  // namespace

void forward_kvcache(const TensorRef& q, const KvCache& c, const TensorRef& out, const TensorRef* lse,
                     const Options& options) {
  const Device dev = q.device;
  const bool varlen_q = c.cu_seqlens_q != nullptr, paged = c.page_table != nullptr;
  check(detail::check_rank("q", q, varlen_q ? 3 : 4,
                           varlen_q ? "[total_q, heads, head_dim]" : "[batch, seqlen, heads, head_dim]"));
  check(detail::check_rank(
      "k_cache", c.k_cache, 4,
      paged ? "[num_pages, page_size, heads, head_dim]" : "[batch, seqlen, heads, head_dim]"));
  check(detail::check_rank("v_cache", c.v_cache, 4, "like k_cache"));
  const int64_t D = q.shape[q.rank - 1], Hq = q.shape[q.rank - 2], Hkv = c.k_cache.shape[2];
  for (int d = 0; d < 4; ++d)
    if (c.v_cache.shape[d] != c.k_cache.shape[d])
      fail("v_cache",
           "shape " + shape_string(c.v_cache) + " differs from k_cache's " + shape_string(c.k_cache));
  if (c.k_cache.shape[3] != D)
    fail("k_cache", "head_dim " + str(c.k_cache.shape[3]) + " differs from q's " + str(D));
  for (auto [name, t] :
       {std::pair<const char*, const TensorRef*>{"k_cache", &c.k_cache}, {"v_cache", &c.v_cache}}) {
    if (t->dtype != q.dtype)
      fail(name, std::string("dtype ") + dtype_name(t->dtype) + " differs from q's " + dtype_name(q.dtype));
    if (t->device != dev) fail(name, "is on " + device_name(t->device) + " but q is on " + device_name(dev));
  }
  if (dev.kind != DeviceKind::kCPU)
    fail("q", "is on " + device_name(dev) + "; forward_kvcache runs on CPU tensors in this version");

  // The batch and each sequence's query rows.
  std::vector<int32_t> cu_q;
  int64_t B = q.shape[0];
  if (varlen_q) {
    check(detail::check_rank("cu_seqlens_q", *c.cu_seqlens_q, 1, "[batch + 1]"));
    B = c.cu_seqlens_q->shape[0] - 1;
    if (B < 0) fail("cu_seqlens_q", "has no entries, expected batch + 1 >= 1");
    cu_q = read_index("cu_seqlens_q", *c.cu_seqlens_q, {B + 1}, dev);
  }
  const auto len_q = [&](int64_t b) -> int64_t { return varlen_q ? cu_q[b + 1] - cu_q[b] : q.shape[1]; };

  // The cache's geometry and the per-sequence index values.
  const int64_t page_size = c.k_cache.shape[1];
  std::vector<int32_t> table, seqlens, batch_idx, leftpad;
  int64_t max_pages = 0, capacity = page_size;
  if (paged) {
    if (c.cache_batch_idx)
      fail("cache_batch_idx", "is for a contiguous cache; a paged one maps pages instead");
    check(detail::check_rank("page_table", *c.page_table, 2, "[batch, max_pages]"));
    max_pages = c.page_table->shape[1];
    table = read_index("page_table", *c.page_table, {B, -1}, dev);
    capacity = max_pages * page_size;
    if (!c.cache_seqlens) fail("cache_seqlens", "is required with page_table");
  }
  seqlens = c.cache_seqlens ? read_index("cache_seqlens", *c.cache_seqlens, {B}, dev)
                            : std::vector<int32_t>(B, static_cast<int32_t>(capacity));
  if (c.cache_batch_idx) batch_idx = read_index("cache_batch_idx", *c.cache_batch_idx, {B}, dev);
  if (c.cache_leftpad) leftpad = read_index("cache_leftpad", *c.cache_leftpad, {B}, dev);

  // The new keys and values.
  if ((c.k_new == nullptr) != (c.v_new == nullptr))
    fail(c.k_new ? "v_new" : "k_new", "is required with the other");
  std::vector<int32_t> cu_new;
  if (c.cu_seqlens_k_new && !c.k_new) fail("cu_seqlens_k_new", "is given without k_new");
  if (c.k_new) {
    const bool packed = c.cu_seqlens_k_new != nullptr;
    for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"k_new", c.k_new}, {"v_new", c.v_new}}) {
      check(detail::check_rank(
          name, *t, packed ? 3 : 4,
          packed ? "[total_new, heads, head_dim]" : "[batch, seqlen_new, heads, head_dim]"));
      if (!packed && t->shape[0] != B)
        fail(name, "batch " + str(t->shape[0]) + ", expected " + str(B) + " as q");
      if (t->shape[t->rank - 2] != Hkv || t->shape[t->rank - 1] != D)
        fail(name, "shape " + shape_string(*t) + ": heads and head_dim must be k_cache's (" + str(Hkv) +
                       ", " + str(D) + ")");
      if (t->dtype != q.dtype)
        fail(name, std::string("dtype ") + dtype_name(t->dtype) + " differs from q's " + dtype_name(q.dtype));
      if (t->device != dev)
        fail(name, "is on " + device_name(t->device) + " but q is on " + device_name(dev));
    }
    for (int d = 0; d < c.k_new->rank; ++d)
      if (c.v_new->shape[d] != c.k_new->shape[d])
        fail("v_new", "shape " + shape_string(*c.v_new) + " differs from k_new's " + shape_string(*c.k_new));
    if (packed) {
      cu_new = read_index("cu_seqlens_k_new", *c.cu_seqlens_k_new, {B + 1}, dev);
      if (cu_new[0] != 0) fail("cu_seqlens_k_new", "entry 0 is " + str(cu_new[0]) + ", expected 0");
      for (int64_t b = 0; b < B; ++b)
        if (cu_new[b + 1] < cu_new[b])
          fail("cu_seqlens_k_new",
               "entry " + str(b + 1) + " is " + str(cu_new[b + 1]) + ", below entry " + str(b));
      if (cu_new[B] != c.k_new->shape[0])
        fail("cu_seqlens_k_new",
             "ends at " + str(cu_new[B]) + ", but k_new has " + str(c.k_new->shape[0]) + " rows");
    }
  }
  const auto new_len = [&](int64_t b) -> int64_t {
    return !c.k_new ? 0 : c.cu_seqlens_k_new ? cu_new[b + 1] - cu_new[b] : c.k_new->shape[1];
  };
  const auto new_row = [&](int64_t b, int64_t i) -> int64_t {
    return c.cu_seqlens_k_new ? cu_new[b] + i : i;
  };

  // Values: lengths within the capacity, rows and pages that exist.
  std::vector<int32_t> total(B);
  int64_t max_total = 0, max_len_q = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (seqlens[b] < 0 || seqlens[b] > capacity)
      fail("cache_seqlens", "entry " + str(b) + " is " + str(seqlens[b]) + ", outside 0.." + str(capacity));
    const int64_t t = seqlens[b] + new_len(b);
    if (t > capacity)
      fail("k_new", "sequence " + str(b) + " has " + str(seqlens[b]) + " cached + " + str(new_len(b)) +
                        " new keys, past the cache's capacity of " + str(capacity));
    total[b] = static_cast<int32_t>(t);
    if (!leftpad.empty() && (leftpad[b] < 0 || leftpad[b] > seqlens[b]))
      fail("cache_leftpad", "entry " + str(b) + " is " + str(leftpad[b]) + ", outside 0..cache_seqlens[" +
                                str(b) + "] = " + str(seqlens[b]));
    if (!batch_idx.empty() && (batch_idx[b] < 0 || batch_idx[b] >= c.k_cache.shape[0]))
      fail("cache_batch_idx",
           "entry " + str(b) + " is " + str(batch_idx[b]) + ", outside 0.." + str(c.k_cache.shape[0] - 1));
    if (!paged && batch_idx.empty() && b >= c.k_cache.shape[0])
      fail("k_cache", "has " + str(c.k_cache.shape[0]) + " cache rows for a batch of " + str(B));
    const int64_t first = leftpad.empty() ? 0 : leftpad[b];
    for (int64_t j = first / std::max<int64_t>(page_size, 1); paged && j * page_size < t; ++j)
      if (table[b * max_pages + j] < 0 || table[b * max_pages + j] >= c.k_cache.shape[0])
        fail("page_table", "entry [" + str(b) + ", " + str(j) + "] is " + str(table[b * max_pages + j]) +
                               ", outside 0.." + str(c.k_cache.shape[0] - 1));
    max_total = std::max(max_total, t);
    max_len_q = std::max(max_len_q, len_q(b));
  }

  // Rotary tables.
  Rotary rot;
  rot.interleaved = c.rotary_interleaved;
  if ((c.rotary_cos == nullptr) != (c.rotary_sin == nullptr))
    fail(c.rotary_cos ? "rotary_sin" : "rotary_cos", "is required with the other");
  const bool positional_q = options.causal || options.window_left >= 0 || options.window_right >= 0;
  if (c.rotary_cos) {
    if (!c.k_new) fail("rotary_cos", "needs k_new (rotary is applied to the new keys and to q)");
    for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"rotary_cos", c.rotary_cos},
                           {"rotary_sin", c.rotary_sin}}) {
      check(detail::check_rank(name, *t, 2, "[seqlen_ro, rotary_dim / 2]"));
      if (t->dtype != q.dtype && t->dtype != DType::kFloat32)
        fail(name, std::string("dtype ") + dtype_name(t->dtype) + ", expected q's (" + dtype_name(q.dtype) +
                       ") or fp32");
      if (t->device != dev)
        fail(name, "is on " + device_name(t->device) + " but q is on " + device_name(dev));
      if (t->shape[0] != c.rotary_cos->shape[0] || t->shape[1] != c.rotary_cos->shape[1])
        fail(name, "shape " + shape_string(*t) + " differs from rotary_cos's " + shape_string(*c.rotary_cos));
    }
    rot.cos = c.rotary_cos, rot.sin = c.rotary_sin, rot.half = c.rotary_cos->shape[1];
    if (rot.half < 1 || 2 * rot.half > D)
      fail("rotary_cos", "rotary_dim / 2 is " + str(rot.half) + ", expected 1.." + str(D / 2) +
                             " (head_dim " + str(D) + ")");
    int64_t last = -1;
    for (int64_t b = 0; b < B; ++b)
      last = std::max({last, seqlens[b] + new_len(b) - 1, seqlens[b] + (positional_q ? len_q(b) - 1 : 0)});
    if (last >= c.rotary_cos->shape[0])
      fail("rotary_cos",
           "has " + str(c.rotary_cos->shape[0]) + " positions, but position " + str(last) + " is needed");
  }

  // Outputs and in-place writes never alias anything they are computed from.
  const TensorRef* read_only[] = {&q,
                                  c.k_new,
                                  c.v_new,
                                  c.rotary_cos,
                                  c.rotary_sin,
                                  c.page_table,
                                  c.cache_seqlens,
                                  c.cache_batch_idx,
                                  c.cache_leftpad,
                                  c.cu_seqlens_q,
                                  c.cu_seqlens_k_new};
  const char* read_names[] = {"q",
                              "k_new",
                              "v_new",
                              "rotary_cos",
                              "rotary_sin",
                              "page_table",
                              "cache_seqlens",
                              "cache_batch_idx",
                              "cache_leftpad",
                              "cu_seqlens_q",
                              "cu_seqlens_k_new"};
  for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"out", &out},
                         {"lse", lse},
                         {"k_cache", &c.k_cache},
                         {"v_cache", &c.v_cache}}) {
    if (!t) continue;
    for (size_t i = 0; i < std::size(read_only); ++i)
      if (read_only[i] && detail::overlaps(*t, *read_only[i]))
        fail(name, std::string("overlaps ") + read_names[i] + " in memory");
  }
  for (auto [name, t] : {std::pair<const char*, const TensorRef*>{"out", &out}, {"lse", lse}})
    if (t && (detail::overlaps(*t, c.k_cache) || detail::overlaps(*t, c.v_cache)))
      fail(name, "overlaps the KV cache in memory");
  if (c.k_new && detail::overlaps(c.k_cache, c.v_cache)) fail("v_cache", "overlaps k_cache in memory");
  if (c.k_new && (detail::self_overlapping(c.k_cache) || detail::self_overlapping(c.v_cache)))
    fail("k_cache", "strides overlap (an appended element would alias another)");

  // q, out, lse and the options as forward() checks them, against a stand-in for the keys of the
  // cache's shape [B, longest, Hkv, D] (the cache's own layout replaces it below).
  TensorRef keys = c.k_cache;
  keys.shape = {B, max_total, Hkv, D, 0};
  keys.stride = {0, 0, 0, 1, 0};
  Seqlens seq;
  seq.cu_seqlens_q = c.cu_seqlens_q;
  seq.max_seqlen_q = c.max_seqlen_q;
  AttnParams p;
  check(detail::make_params(q, keys, keys, out, lse, varlen_q ? &seq : nullptr, options,
                            detail::Entry::kForward, &p));

  // Append: the new rows (rotated) at positions cache_seqlens[b] + i.
  p.k = c.k_cache.data, p.v = c.v_cache.data;
  p.k_stride = strides4(c.k_cache), p.v_stride = strides4(c.v_cache);
  p.page_table = paged ? table.data() : nullptr;
  p.page_size = page_size, p.page_table_stride = max_pages;
  p.kv_batch_idx = batch_idx.empty() ? nullptr : batch_idx.data();
  const int64_t esize = static_cast<int64_t>(dtype_size(q.dtype));
  if (c.k_new) {
    const Strides4 ks = strides4(*c.k_new), vs = strides4(*c.v_new);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < new_len(b); ++i)
        for (int64_t h = 0; h < Hkv; ++h) {
          const int64_t pos = seqlens[b] + i, r = new_row(b, i);
          rot.apply(c.k_new->data, b * ks.b + r * ks.l + h * ks.h, ks.d, c.k_cache.data,
                    detail::kv_offset(p, p.k_stride, b, pos, h), p.k_stride.d, q.dtype, D, pos);
          Rotary{}.apply(c.v_new->data, b * vs.b + r * vs.l + h * vs.h, vs.d, c.v_cache.data,
                         detail::kv_offset(p, p.v_stride, b, pos, h), p.v_stride.d, q.dtype, D, pos);
        }
  }
  // q rotated into a contiguous copy (q itself is the caller's).
  std::vector<char> q_rot;
  if (rot.cos) {
    q_rot.resize(static_cast<size_t>(q.numel() * esize));
    const Strides4 qs = strides4(q);
    const Strides4 rs = varlen_q ? Strides4{0, Hq * D, D, 1} : Strides4{q.shape[1] * Hq * D, Hq * D, D, 1};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < len_q(b); ++i)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t row = varlen_q ? cu_q[b] + i : i, pos = seqlens[b] + (positional_q ? i : 0);
          rot.apply(q.data, b * qs.b + row * qs.l + h * qs.h, qs.d, q_rot.data(),
                    b * rs.b + row * rs.l + h * rs.h, 1, q.dtype, D, pos);
        }
    p.q = q_rot.data(), p.q_stride = rs;
  }
  // Attention over positions [leftpad, total) of each sequence's cache.
  p.seqs.used_k = total.data();
  p.seqs.start_k = leftpad.empty() ? nullptr : leftpad.data();
  p.seqs.max_k = max_total;
  p.seqlen_k = max_total;
  (void)max_len_q;
  detail::cpu::forward(p);
}

}  // namespace tileattn
