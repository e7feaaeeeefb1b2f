// sm80.h: host entry points of the sm80 kernel, one per compiled head dim (no CUDA headers here).
#pragma once

#include "common/params.h"

namespace tileattn::detail::sm80 {

// Runs the forward kernel compiled for head dim kHeadDim (64, 96, 128 or 256) on a validated
// problem whose head dim is at most kHeadDim, on p.cuda_stream and the current device.
template <int kHeadDim>
void forward_hdim(const AttnParams& p);

extern template void forward_hdim<64>(const AttnParams&);
extern template void forward_hdim<96>(const AttnParams&);
extern template void forward_hdim<128>(const AttnParams&);
extern template void forward_hdim<256>(const AttnParams&);

}  // namespace tileattn::detail::sm80
