// sm90.h: the sm90 forward's entry point and what it accepts (host-only).
#pragma once

#include <string>

#include "common/params.h"

namespace tileattn::detail::sm90 {

// Empty when the sm90 kernel can run p, else the reason (on top of the sm80 kernel's checks):
// head dims 64, 128 and 256 only, nonempty sequences, TMA-compatible strides.
inline std::string rejects(const AttnParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim " + std::to_string(p.head_dim) + " has no sm90 kernel (64, 128 and 256 do)";
  if (p.seqlen_q == 0 || p.seqlen_k == 0) return "an empty sequence has no TMA map";
  for (const Strides4* s : {&p.q_stride, &p.k_stride, &p.v_stride, &p.out_stride})
    if (s->b <= 0 || s->l <= 0 || s->h <= 0) return "a zero stride has no TMA map";
  return {};
}

void forward(const AttnParams& p);  // a problem rejects() accepted, on an sm_90 GPU

}  // namespace tileattn::detail::sm90
