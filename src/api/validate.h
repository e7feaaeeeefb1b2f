// validate.h: checks the public arguments once and turns them into AttnParams.
#pragma once

#include <optional>

#include "common/params.h"
#include "tileattn/attention.h"
#include "tileattn/error.h"

namespace tileattn::detail {

enum class Entry { kForward, kReference, kEager };

// Returns the first problem found (naming the argument and its value), or fills *params.
std::optional<Error> make_params(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                 const TensorRef& out, const TensorRef* lse,
                                 const Options& options, Entry entry, AttnParams* params);

}  // namespace tileattn::detail
