// combine.h: the split-KV merge on the CPU (DESIGN.md section 6).
#pragma once

#include "common/combine.h"

namespace tileattn::detail::cpu {

// Merges c's partial states into its out (and lse); every row in its own fixed split order, so
// the result does not depend on the thread count.
void combine(const CombineParams& c);

}  // namespace tileattn::detail::cpu
