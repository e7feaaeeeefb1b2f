// cpu_forward.h: the tiled CPU forward (DESIGN.md section 2).
#pragma once

#include "common/params.h"

namespace tileattn::detail::cpu {

// Runs the validated problem; never allocates O(Lq * Lk). Bitwise identical for any thread count.
void forward(const AttnParams& p);

}  // namespace tileattn::detail::cpu
