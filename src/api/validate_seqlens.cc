// validate_seqlens.cc: the index tensors of varlen calls (cu_seqlens, seqused, maxima).
#include <string>
#include <tuple>

#include "api/validate.h"
#include "common/seqlens_check.h"

namespace tileattn::detail {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

// An index tensor: int32, rank 1 of `size` entries, contiguous.
std::optional<Error> check_index(const std::string& name, const TensorRef& t, int64_t size,
                                 const char* meaning) {
  if (t.rank != 1) return Error(name, "rank " + str(t.rank) + ", expected 1 dim [" + meaning + "]");
  if (t.dtype != DType::kInt32)
    return Error(name, std::string("dtype ") + dtype_name(t.dtype) + ", expected int32");
  if (size >= 0 && t.shape[0] != size)
    return Error(name, "has " + str(t.shape[0]) + " entries, expected " + str(size) + " (" + meaning + ")");
  if (t.shape[0] > 1 && t.stride[0] != 1)
    return Error(name, "stride " + str(t.stride[0]) + ", expected 1 (contiguous)");
  if (t.shape[0] > 0 && t.data == nullptr) return Error(name, "data is null");
  return std::nullopt;
}

const char* side_name(bool q, const char* what) {
  static const std::string names[2][3] = {
      {"seqlens.cu_seqlens_k", "seqlens.seqused_k", "seqlens.max_seqlen_k"},
      {"seqlens.cu_seqlens_q", "seqlens.seqused_q", "seqlens.max_seqlen_q"}};
  const int i = what[0] == 'c' ? 0 : what[0] == 'u' ? 1 : 2;
  return names[q][i].c_str();
}

}  // namespace

std::optional<Error> check_seqlens(const tileattn::Seqlens& s, const TensorRef& q, const TensorRef& k,
                                   int64_t* batch, SeqlensView* view) {
  // The batch: from cu_seqlens_q, else cu_seqlens_k, else the dense q.
  int64_t B = -1;
  const char* source = "";
  if (s.cu_seqlens_q && s.cu_seqlens_q->rank == 1)
    B = s.cu_seqlens_q->shape[0] - 1, source = "cu_seqlens_q";
  else if (!s.cu_seqlens_q)
    B = q.shape[0], source = "q";
  for (auto [name, t, size, meaning] :
       {std::tuple<const char*, const TensorRef*, int64_t, const char*>{"seqlens.cu_seqlens_q",
                                                                        s.cu_seqlens_q, -1, "batch + 1"},
        {"seqlens.cu_seqlens_k", s.cu_seqlens_k, B < 0 ? -1 : B + 1, "batch + 1"},
        {"seqlens.seqused_q", s.seqused_q, B, "batch"},
        {"seqlens.seqused_k", s.seqused_k, B, "batch"}}) {
    if (!t) continue;
    if (auto e = check_index(name, *t, size, meaning)) return e;
    view->tensors.emplace_back(name, t);
  }
  if (s.cu_seqlens_q && s.cu_seqlens_q->shape[0] < 1)
    return Error("seqlens.cu_seqlens_q", "has 0 entries, expected batch + 1 >= 1");
  if (!s.cu_seqlens_k && k.shape[0] != B)
    return Error("k", "shape " + shape_string(k) + ": batch (dim 0) is " + str(k.shape[0]) + ", expected " +
                          str(B) + " as in " + source);
  if (s.cu_seqlens_q && s.max_seqlen_q < -1)
    return Error("seqlens.max_seqlen_q",
                 str(s.max_seqlen_q) + ", expected >= 0 (or -1 on the CPU: computed)");
  if (s.cu_seqlens_k && s.max_seqlen_k < -1)
    return Error("seqlens.max_seqlen_k",
                 str(s.max_seqlen_k) + ", expected >= 0 (or -1 on the CPU: computed)");
  // The host cannot read device memory: the maxima size the launch and must be given.
  if (q.device.kind == DeviceKind::kCUDA) {
    if (s.cu_seqlens_q && s.max_seqlen_q < 0)
      return Error("seqlens.max_seqlen_q", "is required with cu_seqlens_q on CUDA (the host cannot read it)");
    if (s.cu_seqlens_k && s.max_seqlen_k < 0)
      return Error("seqlens.max_seqlen_k", "is required with cu_seqlens_k on CUDA (the host cannot read it)");
  }
  view->cu_q = s.cu_seqlens_q, view->cu_k = s.cu_seqlens_k, view->used_q = s.seqused_q,
  view->used_k = s.seqused_k;
  auto ptr = [](const TensorRef* t) { return t ? static_cast<const int32_t*>(t->data) : nullptr; };
  Seqs& seqs = view->seqs;
  seqs.cu_q = ptr(s.cu_seqlens_q), seqs.cu_k = ptr(s.cu_seqlens_k);
  seqs.used_q = ptr(s.seqused_q), seqs.used_k = ptr(s.seqused_k);
  // A dense side's maximum is its length (seqused only shortens sequences).
  seqs.max_q = s.cu_seqlens_q ? s.max_seqlen_q : q.shape[1];
  seqs.max_k = s.cu_seqlens_k ? s.max_seqlen_k : k.shape[1];
  *batch = B;
  return std::nullopt;
}

std::optional<Error> index_fault_error(const IndexFaultAt& f, bool side_q) {
  const std::string cu = side_name(side_q, "cu"), used = side_name(side_q, "used"),
                    max = side_name(side_q, "max");
  switch (f.code) {
    case kFaultCuFirst:
      return Error(cu, "entry 0 is " + str(f.value) + ", expected 0");
    case kFaultCuDecreases:
      return Error(cu, "entry " + str(f.index) + " is " + str(f.value) + ", less than entry " +
                           str(f.index - 1) + " (" + str(f.limit) + "); prefix sums never decrease");
    case kFaultCuLast:
      return Error(cu, "the last entry (" + str(f.index) + ") is " + str(f.value) + ", expected " +
                           (side_q ? "q" : "k") + "'s row count " + str(f.limit));
    case kFaultUsed:
      return Error(used, "entry " + str(f.index) + " is " + str(f.value) + ", outside 0.." + str(f.limit) +
                             " (the length of sequence " + str(f.index) + ")");
    case kFaultMax:
      return Error(max,
                   str(f.limit) + " is less than sequence " + str(f.index) + "'s length " + str(f.value));
    default:
      return std::nullopt;
  }
}

IndexCheck index_check(const SeqlensView& view, bool side_q, int64_t rows_or_len) {
  IndexCheck c;
  c.cu = side_q ? view.seqs.cu_q : view.seqs.cu_k;
  c.used = side_q ? view.seqs.used_q : view.seqs.used_k;
  c.rows = rows_or_len;
  c.max_len = c.cu ? (side_q ? view.seqs.max_q : view.seqs.max_k) : -1;
  return c;
}

std::optional<Error> check_seqlens_values(SeqlensView& view, const TensorRef& q, const TensorRef& k) {
  const int64_t B = view.cu_q ? view.cu_q->shape[0] - 1 : q.shape[0];
  for (const bool side_q : {true, false}) {
    const TensorRef& t = side_q ? q : k;
    const bool packed = side_q ? view.seqs.cu_q != nullptr : view.seqs.cu_k != nullptr;
    const IndexCheck c = index_check(view, side_q, packed ? t.shape[0] : t.shape[1]);
    int64_t longest = 0;
    if (auto e = index_fault_error(find_index_fault(c, B, &longest), side_q)) return e;
    if (c.cu && c.max_len < 0) (side_q ? view.seqs.max_q : view.seqs.max_k) = longest;
  }
  return std::nullopt;
}

}  // namespace tileattn::detail
