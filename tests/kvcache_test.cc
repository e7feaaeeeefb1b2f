// kvcache_test.cc: forward_kvcache on the CPU. Each case builds a cache (contiguous with batch
// indices, or paged with shuffled pages of odd sizes), appends new keys and values with and
// without rotary, and checks: the appended slots hold the rotated new rows, every other cache
// element is bit-for-bit unchanged, and each sequence's output matches the fp64 oracle run on
// its keys gathered from the updated cache (positions [leftpad, cache_seqlens + new)), with q
// rotated by an independent implementation, by the 2x rule against eager. Bad arguments name
// themselves and write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace tileattn::test {
namespace {

struct KvSpec {
  int64_t batch = 3, len_q = 1, len_new = 1, hq = 4, hkv = 2, d = 32;
  int64_t capacity = 80, page_size = 0;  // page_size 0: a contiguous cache
  std::vector<int64_t> seqlens = {10, 0, 57}, leftpad;
  bool batch_idx = false, rotary = false, interleaved = true;
  int64_t rotary_dim = 16;
  DType dtype = DType::kFloat32;
  Options options;
  std::string name() const {
    return std::string(dtype_name(dtype)) + (page_size ? "_paged" + std::to_string(page_size) : "_contig") +
           (batch_idx ? "_bidx" : "") + (leftpad.empty() ? "" : "_leftpad") +
           (rotary ? (interleaved ? "_rope" : "_neox") : "") + "_q" + std::to_string(len_q) + "_new" +
           std::to_string(len_new) + (options.causal ? "_causal" : "");
  }
};

HostTensor int_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  HostTensor t = HostTensor::contiguous(DType::kInt32, std::move(shape), 0);
  for (size_t i = 0; i < values.size(); ++i)
    static_cast<int32_t*>(t.ref().data)[i] = static_cast<int32_t>(values[i]);
  return t;
}

// The rotation of row x at position pos (double, as the library does), rounded to the dtype.
std::vector<double> rotate(std::vector<double> x, const HostTensor& cos, const HostTensor& sin, int64_t pos,
                           int64_t half, bool interleaved) {
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const double c = cos.get({pos, i, 0, 0}), s = sin.get({pos, i, 0, 0}), x1 = x[a], x2 = x[b];
    x[a] = x1 * c - x2 * s;
    x[b] = x2 * c + x1 * s;
  }
  return x;
}

struct KvCase {
  KvSpec s;
  HostTensor q, k_cache, v_cache, k_new, v_new, cos, sin, table, seqlens, batch_idx, leftpad;
  std::vector<int64_t> pages, rows;  // page_table values (B x max_pages), cache row of each sequence
  int64_t max_pages = 0;

  explicit KvCase(const KvSpec& spec) : s(spec) {
    std::mt19937_64 rng = rng_for(s.name());
    q = HostTensor::contiguous(s.dtype, {s.batch, s.len_q, s.hq, s.d});
    q.fill_normal(rng);
    const int64_t cache_rows = s.page_size ? 0 : s.batch + 2;
    if (s.page_size) {
      max_pages = (s.capacity + s.page_size - 1) / s.page_size;
      std::vector<int64_t> order(s.batch * max_pages + 3);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);  // pages in any order, some unused
      pages.assign(order.begin(), order.begin() + s.batch * max_pages);
      k_cache =
          HostTensor::contiguous(s.dtype, {static_cast<int64_t>(order.size()), s.page_size, s.hkv, s.d});
      table = int_tensor(pages, {s.batch, max_pages});
    } else {
      k_cache = HostTensor::contiguous(s.dtype, {cache_rows, s.capacity, s.hkv, s.d});
      for (int64_t b = 0; b < s.batch; ++b) rows.push_back(s.batch_idx ? (b * 2 + 1) % cache_rows : b);
      if (s.batch_idx) batch_idx = int_tensor(rows, {s.batch});
    }
    v_cache = HostTensor::contiguous(s.dtype, {k_cache.dim(0), k_cache.dim(1), s.hkv, s.d});
    k_cache.fill_normal(rng), v_cache.fill_normal(rng);
    seqlens = int_tensor(s.seqlens, {s.batch});
    if (!s.leftpad.empty()) leftpad = int_tensor(s.leftpad, {s.batch});
    if (s.len_new > 0) {
      k_new = HostTensor::contiguous(s.dtype, {s.batch, s.len_new, s.hkv, s.d});
      v_new = HostTensor::contiguous(s.dtype, {s.batch, s.len_new, s.hkv, s.d});
      k_new.fill_normal(rng), v_new.fill_normal(rng);
    }
    if (s.rotary) {
      const int64_t ro = s.capacity + s.len_q;
      cos = HostTensor::contiguous(s.dtype, {ro, s.rotary_dim / 2});
      sin = HostTensor::contiguous(s.dtype, {ro, s.rotary_dim / 2});
      for (int64_t p = 0; p < ro; ++p)
        for (int64_t i = 0; i < s.rotary_dim / 2; ++i) {
          const double theta = p * std::pow(10000.0, -2.0 * i / s.rotary_dim);
          cos.set({p, i, 0, 0}, std::cos(theta)), sin.set({p, i, 0, 0}, std::sin(theta));
        }
    }
  }
  // Element [pos, h, d] of sequence b's cache, as an index into k_cache / v_cache.
  Index at(int64_t b, int64_t pos, int64_t h, int64_t d) const {
    if (s.page_size) return {pages[b * max_pages + pos / s.page_size], pos % s.page_size, h, d};
    return {rows[b], pos, h, d};
  }
  KvCache args() const {
    KvCache c;
    c.k_cache = k_cache.ref(), c.v_cache = v_cache.ref();
    static thread_local std::vector<TensorRef> refs;
    refs.assign(8, TensorRef{});
    auto opt = [&](const HostTensor& t, int i) -> const TensorRef* {
      if (t.numel() == 0) return nullptr;
      refs[i] = t.ref();
      return &refs[i];
    };
    c.page_table = s.page_size ? opt(table, 0) : nullptr;
    c.cache_seqlens = opt(seqlens, 1);
    c.cache_batch_idx = s.batch_idx ? opt(batch_idx, 2) : nullptr;
    c.cache_leftpad = s.leftpad.empty() ? nullptr : opt(leftpad, 3);
    c.k_new = s.len_new ? opt(k_new, 4) : nullptr;
    c.v_new = s.len_new ? opt(v_new, 5) : nullptr;
    c.rotary_cos = s.rotary ? opt(cos, 6) : nullptr;
    c.rotary_sin = s.rotary ? opt(sin, 7) : nullptr;
    c.rotary_interleaved = s.interleaved;
    return c;
  }
};

void check(const KvSpec& spec) {
  KvCase kc(spec);
  const KvSpec& s = kc.s;
  const HostTensor k_before = kc.k_cache, v_before = kc.v_cache;
  Result r;
  r.out = HostTensor::contiguous(s.dtype, {s.batch, s.len_q, s.hq, s.d});
  r.lse = HostTensor::contiguous(DType::kFloat32, {s.batch, s.hq, s.len_q});
  r.out.poison(), r.lse.poison();
  const TensorRef lse = r.lse.ref();
  forward_kvcache(kc.q.ref(), kc.args(), r.out.ref(), &lse, s.options);
  const int64_t half = s.rotary ? s.rotary_dim / 2 : 0;

  // The cache: appended slots hold the (rotated) new rows, everything else is untouched.
  HostTensor k_want = k_before, v_want = v_before;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.len_new; ++i)
      for (int64_t h = 0; h < s.hkv; ++h) {
        const int64_t pos = s.seqlens[b] + i;
        std::vector<double> x(s.d);
        for (int64_t d = 0; d < s.d; ++d) x[d] = kc.k_new.get({b, i, h, d});
        if (s.rotary) x = rotate(x, kc.cos, kc.sin, pos, half, s.interleaved);
        for (int64_t d = 0; d < s.d; ++d) {
          k_want.set(kc.at(b, pos, h, d), x[d]);
          v_want.set(kc.at(b, pos, h, d), kc.v_new.get({b, i, h, d}));
        }
      }
  EXPECT_TRUE(kc.k_cache.bytes() == k_want.bytes()) << "k_cache differs from the expected append";
  EXPECT_TRUE(kc.v_cache.bytes() == v_want.bytes()) << "v_cache differs from the expected append";

  // Each sequence against the oracle on its gathered keys, rotated q, the 2x rule against eager.
  const bool positional = s.options.causal || s.options.window_left >= 0 || s.options.window_right >= 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t first = s.leftpad.empty() ? 0 : s.leftpad[b], lk = s.seqlens[b] + s.len_new - first;
    Problem p;
    p.seqlen_q = s.len_q, p.seqlen_k = lk, p.heads_q = s.hq, p.heads_kv = s.hkv, p.head_dim = s.d;
    p.dtype = s.dtype, p.options = s.options;
    Case one(p);
    for (int64_t i = 0; i < s.len_q; ++i)
      for (int64_t h = 0; h < s.hq; ++h) {
        std::vector<double> x(s.d);
        for (int64_t d = 0; d < s.d; ++d) x[d] = kc.q.get({b, i, h, d});
        if (s.rotary) x = rotate(x, kc.cos, kc.sin, s.seqlens[b] + (positional ? i : 0), half, s.interleaved);
        for (int64_t d = 0; d < s.d; ++d) one.q.set({0, i, h, d}, x[d]);
      }
    for (int64_t j = 0; j < lk; ++j)
      for (int64_t h = 0; h < s.hkv; ++h)
        for (int64_t d = 0; d < s.d; ++d) {
          one.k.set({0, j, h, d}, kc.k_cache.get(kc.at(b, first + j, h, d)));
          one.v.set({0, j, h, d}, kc.v_cache.get(kc.at(b, first + j, h, d)));
        }
    one.run_oracle();
    Result mine = fresh_outputs(p);
    for (int64_t i = 0; i < s.len_q; ++i)
      for (int64_t h = 0; h < s.hq; ++h) {
        for (int64_t d = 0; d < s.d; ++d) mine.out.set({0, i, h, d}, r.out.get({b, i, h, d}));
        mine.lse.set({0, h, i, 0}, r.lse.get({b, h, i, 0}));
      }
    const Report rep = judge(mine, one, DeviceKind::kCPU);
    EXPECT_TRUE(rep.ok()) << s.name() << " sequence " << b << ": " << rep.str();
  }
}

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
