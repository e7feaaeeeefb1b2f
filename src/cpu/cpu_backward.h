// cpu_backward.h: the tiled CPU backward (DESIGN.md section 7).
#pragma once

#include "common/params.h"

namespace tileattn::detail::cpu {

// Runs the validated backward; never allocates O(Lq * Lk). One work item per (sequence, KV
// head) walks its query heads and blocks in a fixed order, so the gradients are bitwise the
// same for any thread count (deterministic by construction).
void backward(const BackwardParams& b);

}  // namespace tileattn::detail::cpu
