// persistent_test.cu: the sm90 kernel with the other scheduling than the library's
// (tile_config.h: one CTA a tile at D 64 and 128, persistent CTAs at D 256) on the sm90 sweep
// against the oracle, under the same rule as the library's kernel. Built with -DTILEATTN_SM90_TUNE=ON, beside
// tune_sm90, which times them.
#include <gtest/gtest.h>

#include <string>

#include "api/validate.h"
#include "cuda/sm90/launch.cuh"
#include "cuda_case.h"
#include "sm90_cases.h"

namespace tileattn::cuda_test {
namespace {

using detail::AttnParams;
using detail::sm90::TileConfig;

template <int D, bool kServing = false>
struct Experimental {
  static constexpr TileConfig kCfg = [] {
    TileConfig c = kServing ? detail::sm90::serving_tile_config(D) : detail::sm90::tile_config(D);
    c.persistent = !c.persistent;
    if (!c.persistent) c.q_buffers = 1, c.defer_store_wait = false;  // persistent CTAs' options
    return c;
  }();
};

void run_experimental(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& out,
                      const TensorRef* lse, const Options& options) {
  AttnParams p;
  if (auto error = detail::make_params(q, k, v, out, lse, nullptr, options, detail::Entry::kForward, &p))
    throw *error;
  if (p.head_dim == 64)
    detail::sm90::launch_for<Experimental<64>>(p);
  else if (p.head_dim == 128)
    detail::sm90::launch_for<Experimental<128>, Experimental<128, true>>(p);
  else
    detail::sm90::launch_for<Experimental<256>>(p);
}

class Sm90Experimental : public ::testing::TestWithParam<Problem> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major != 9) GTEST_SKIP() << "not an sm_90 GPU";
  }
};

TEST_P(Sm90Experimental, OtherSchedulingMatchesOracle) {
  const Report r = run_case(GetParam(), 1, -1, run_experimental);
  EXPECT_TRUE(r.ok()) << GetParam().name() << ": " << r.str();
}

INSTANTIATE_TEST_SUITE_P(Sweep, Sm90Experimental, ::testing::ValuesIn(sm90_cases()), name_of);

}  // namespace
}  // namespace tileattn::cuda_test
