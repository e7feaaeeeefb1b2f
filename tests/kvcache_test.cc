// kvcache_test.cc: forward_kvcache on the CPU. Each case (kvcache_case.h) builds a cache
// (contiguous with batch indices, or paged with shuffled pages of odd sizes), appends new keys
// and values with and without rotary, and checks: the appended slots hold the rotated new rows,
// every other cache element is bit-for-bit unchanged, and each sequence's output matches the
// fp64 oracle run on its keys gathered from the updated cache, by the 2x rule against eager.
// Bad arguments name themselves and write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvcache_case.h"
#include "test_util.h"

namespace tileattn::test {
namespace {

void check(const KvSpec& spec) { check_kvcache(spec, DeviceKind::kCPU, run_kvcache_cpu); }

std::vector<KvSpec> specs() {
  std::vector<KvSpec> out;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (int64_t page : {0, 1, 7, 16})
      for (int variant = 0; variant < 4; ++variant) {
        KvSpec s;
        s.dtype = dtype, s.page_size = page;
        if (variant == 1) s.len_new = 0, s.seqlens = {80, 1, 33};  // attention over the cache alone
        if (variant == 2)
          s.rotary = true, s.interleaved = page % 2 == 0, s.len_q = 3, s.len_new = 3, s.options.causal = true;
        if (variant == 3) s.len_q = 5, s.len_new = 9, s.seqlens = {0, 20, 71}, s.options.window_left = 6;
        if (page == 0 && variant != 1) s.batch_idx = true;
        if (variant == 2) s.leftpad = {3, 0, 50};
        out.push_back(s);
      }
  KvSpec gqa;  // 8 query heads on one KV head, a decode step with rotary over NeoX halves of 24 dims
  gqa.hq = 8, gqa.hkv = 1, gqa.d = 40, gqa.rotary = true, gqa.interleaved = false, gqa.rotary_dim = 24;
  gqa.page_size = 5, gqa.options.softcap = 10.0f;
  out.push_back(gqa);
  // A packed q and packed new keys (one sequence adds none), NeoX rotary from fp32 tables, paged.
  KvSpec packed;
  packed.dtype = DType::kBFloat16, packed.page_size = 16, packed.lens_q = {2, 1, 3},
  packed.lens_new = {2, 0, 3};
  packed.rotary = true, packed.interleaved = false, packed.rotary_fp32 = true, packed.options.causal = true;
  out.push_back(packed);
  // The same on a contiguous cache with batch indices and left padding, interleaved rotary.
  KvSpec contig = packed;
  contig.page_size = 0, contig.batch_idx = true, contig.leftpad = {1, 0, 5}, contig.interleaved = true;
  contig.lens_q = {1, 4, 2}, contig.lens_new = {1, 4, 0}, contig.dtype = DType::kFloat16;
  out.push_back(contig);
  return out;
}

class KvCacheCpu : public testing::TestWithParam<KvSpec> {};
TEST_P(KvCacheCpu, AppendsInPlaceAndMatchesTheOracle) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cases, KvCacheCpu, testing::ValuesIn(specs()), [](const auto& info) {
  return info.param.name() + "_" + std::to_string(info.index);
});

TEST(KvCache, BadArgumentsNameThemselvesAndWriteNothing) {
  KvSpec s;
  s.page_size = 8;
  KvCase kc(s);
  const HostTensor k_before = kc.k_cache;
  HostTensor out = HostTensor::contiguous(s.dtype, {s.batch, s.len_q, s.hq, s.d});
  auto expect = [&](KvCache c, const std::string& argument, const std::string& text) {
    out.poison();
    try {
      forward_kvcache(kc.q.ref(), c, out.ref(), nullptr);
      ADD_FAILURE() << "accepted: " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_TRUE(kc.k_cache.bytes() == k_before.bytes()) << argument << ": the cache was written";
    EXPECT_EQ(out.count_unwritten(), out.numel()) << argument << ": out was written";
  };
  HostTensor bad_table = int_tensor(std::vector<int64_t>(kc.pages.size(), 0), {s.batch, kc.max_pages});
  static_cast<int32_t*>(bad_table.ref().data)[2 * kc.max_pages + 3] = 1000;  // a page that does not exist
  KvCache c = kc.args();
  TensorRef table_ref = bad_table.ref();
  c.page_table = &table_ref;
  expect(c, "page_table", "entry [2, 3] is 1000");
  HostTensor full = int_tensor({10, 0, 80}, {s.batch});  // 80 cached + 1 new > capacity 80
  TensorRef full_ref = full.ref();
  c = kc.args(), c.cache_seqlens = &full_ref;
  expect(c, "k_new", "past the cache's capacity of 80");
  HostTensor neg = int_tensor({10, -1, 5}, {s.batch});
  TensorRef neg_ref = neg.ref();
  c = kc.args(), c.cache_seqlens = &neg_ref;
  expect(c, "cache_seqlens", "entry 1 is -1");
  c = kc.args(), c.v_new = nullptr;
  expect(c, "v_new", "is required");
  HostTensor cos = HostTensor::contiguous(s.dtype, {20, 8}), sin = HostTensor::contiguous(s.dtype, {20, 8});
  TensorRef cos_ref = cos.ref(), sin_ref = sin.ref();
  c = kc.args(), c.rotary_cos = &cos_ref, c.rotary_sin = &sin_ref;
  expect(c, "rotary_cos", "position 57 is needed");
  c = kc.args(), c.page_table = nullptr;  // the page pool read as a contiguous cache: rows of 8
  expect(c, "cache_seqlens", "entry 0 is 10, outside 0..8");
}

}  // namespace
}  // namespace tileattn::test
