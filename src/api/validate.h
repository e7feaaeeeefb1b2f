// validate.h: checks the public arguments once and turns them into AttnParams.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/params.h"
#include "common/seqlens_check.h"
#include "tileattn/attention.h"
#include "tileattn/error.h"
#include "tileattn/varlen.h"

namespace tileattn::detail {

enum class Entry { kForward, kReference, kEager };

// Returns the first problem found (naming the argument and its value), or fills *params.
// seqlens: null for a dense batch, else the varlen description (tileattn/varlen.h).
std::optional<Error> make_params(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                 const TensorRef& out, const TensorRef* lse, const tileattn::Seqlens* seqlens,
                                 const Options& options, Entry entry, AttnParams* params);

// A view's rank, sizes and strides (>= 0, extent within 2^60 elements, data for a nonempty view).
std::optional<Error> check_rank(const char* name, const TensorRef& t, int rank, const char* layout);
// Whether two views share memory (on one device); whether a view's elements alias each other.
bool overlaps(const TensorRef& a, const TensorRef& b);
bool self_overlapping(const TensorRef& t);
// [B, L, H, D] strides of a rank-4 view, or of a packed rank-3 one (batch stride 0).
Strides4 strides4(const TensorRef& t);

// The index tensors of a varlen call, checked for shape, dtype and layout (validate_seqlens.cc).
struct SeqlensView {
  Seqs seqs;  // their pointers, and the maxima (given, or -1 until the values are read)
  std::vector<std::pair<std::string, const TensorRef*>> tensors;  // by argument name
  const TensorRef *cu_q = nullptr, *cu_k = nullptr, *used_q = nullptr, *used_k = nullptr;
};

// Shapes, dtypes and strides of the index tensors against q and k; sets *batch and *view.
std::optional<Error> check_seqlens(const tileattn::Seqlens& s, const TensorRef& q, const TensorRef& k,
                                   int64_t* batch, SeqlensView* view);
// Their values, read on the host (CPU tensors): prefix sums that start at 0, never decrease
// and end at the row count; used lengths within the sequences; maxima that hold (computed
// when not given).
std::optional<Error> check_seqlens_values(SeqlensView& view, const TensorRef& q, const TensorRef& k);
// What find_index_fault checks for one side (rows_or_len: the packed row count, or the dense
// length).
IndexCheck index_check(const SeqlensView& view, bool side_q, int64_t rows_or_len);

// The Error of a fault find_index_fault (common/seqlens_check.h) reported for the q side or the
// k side, on the host or on the device; nullopt for kFaultNone.
std::optional<Error> index_fault_error(const IndexFaultAt& fault, bool side_q);

}  // namespace tileattn::detail
