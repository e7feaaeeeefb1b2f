// sm90.h: the sm90 forward's entry point (host-only); what it accepts is in dispatch/.
#pragma once

#include "common/params.h"

namespace tileattn::detail::sm90 {

// A problem dispatch accepted for the sm90 kernel (dispatch/cuda_limits.cc), on an sm_90 GPU.
void forward(const AttnParams& p);

}  // namespace tileattn::detail::sm90
