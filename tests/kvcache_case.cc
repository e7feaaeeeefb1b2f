// kvcache_case.cc: forward_kvcache test cases and their check (kvcache_case.h).
#include "kvcache_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

namespace tileattn::test {
namespace {

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

std::vector<int64_t> prefix(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), cu.begin() + 1);
  return cu;
}

// Two elements of a 16-bit float type within one unit in the last place (same sign).
bool within_ulp(uint64_t a, uint64_t b, DType dtype) {
  if (a == b) return true;
  if (dtype_size(dtype) != 2) return false;
  if ((a ^ b) & 0x8000u) return (a & 0x7fffu) + (b & 0x7fffu) <= 1;  // +-0 and the smallest neighbours
  return (a > b ? a - b : b - a) <= 1;
}

}  // namespace

std::string KvSpec::name() const {
  std::string n = std::string(dtype_name(dtype)) +
                  (page_size ? "_paged" + std::to_string(page_size) : "_contig") +
                  (batch_idx ? "_bidx" : "") + (leftpad.empty() ? "" : "_leftpad") +
                  (rotary ? (interleaved ? "_rope" : "_neox") : "") + "_q" + std::to_string(len_q) + "_new" +
                  std::to_string(len_new) + (options.causal ? "_causal" : "");
  // The name seeds the case's data (rng_for).
  if (!lens_q.empty()) n += "_varq";
  if (!lens_new.empty()) n += "_packednew";
  if (rotary && rotary_fp32) n += "_rofp32";
  if (options.window_left >= 0 || options.window_right >= 0) n += "_win";
  if (options.softcap > 0.0f) n += "_softcap";
  if (options.num_splits > 0) n += "_s" + std::to_string(options.num_splits);
  if (d != 32 || hq != 4 || hkv != 2)
    n += "_H" + std::to_string(hq) + "x" + std::to_string(hkv) + "_D" + std::to_string(d);
  return n;
}

bool KvSpec::appends() const { return !lens_new.empty() || len_new > 0; }

HostTensor int_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  HostTensor t = HostTensor::contiguous(DType::kInt32, std::move(shape), 0);
  for (size_t i = 0; i < values.size(); ++i)
    static_cast<int32_t*>(t.ref().data)[i] = static_cast<int32_t>(values[i]);
  return t;
}

KvCase::KvCase(const KvSpec& spec) : s(spec) {
  std::mt19937_64 rng = rng_for(s.name());
  if (s.lens_q.empty()) {
    q = HostTensor::contiguous(s.dtype, {s.batch, s.len_q, s.hq, s.d});
    q_start.assign(s.batch, 0);
  } else {
    const std::vector<int64_t> cu = prefix(s.lens_q);
    q = HostTensor::contiguous(s.dtype, {cu.back(), s.hq, s.d});
    cu_q = int_tensor(cu, {s.batch + 1});
    q_start.assign(cu.begin(), cu.end() - 1);
  }
  q.fill_normal(rng);
  const int64_t cache_rows = s.page_size ? 0 : s.batch + 2;
  if (s.page_size) {
    max_pages = (s.capacity + s.page_size - 1) / s.page_size;
    std::vector<int64_t> order(s.batch * max_pages + 3);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);  // pages in any order, some unused
    pages.assign(order.begin(), order.begin() + s.batch * max_pages);
    k_cache = HostTensor::contiguous(s.dtype, {static_cast<int64_t>(order.size()), s.page_size, s.hkv, s.d});
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
  if (!s.lens_new.empty()) {
    const std::vector<int64_t> cu = prefix(s.lens_new);
    k_new = HostTensor::contiguous(s.dtype, {cu.back(), s.hkv, s.d});
    v_new = HostTensor::contiguous(s.dtype, {cu.back(), s.hkv, s.d});
    cu_new = int_tensor(cu, {s.batch + 1});
    new_start.assign(cu.begin(), cu.end() - 1);
    k_new.fill_normal(rng), v_new.fill_normal(rng);
  } else if (s.len_new > 0) {
    k_new = HostTensor::contiguous(s.dtype, {s.batch, s.len_new, s.hkv, s.d});
    v_new = HostTensor::contiguous(s.dtype, {s.batch, s.len_new, s.hkv, s.d});
    new_start.assign(s.batch, 0);
    k_new.fill_normal(rng), v_new.fill_normal(rng);
  }
  if (s.rotary) {
    int64_t ro = s.capacity + s.len_q;
    for (int64_t b = 0; b < s.batch; ++b) ro = std::max(ro, s.seqlens[b] + s.queries(b));
    const DType rdt = s.rotary_fp32 ? DType::kFloat32 : s.dtype;
    cos = HostTensor::contiguous(rdt, {ro, s.rotary_dim / 2});
    sin = HostTensor::contiguous(rdt, {ro, s.rotary_dim / 2});
    for (int64_t p = 0; p < ro; ++p)
      for (int64_t i = 0; i < s.rotary_dim / 2; ++i) {
        const double theta = p * std::pow(10000.0, -2.0 * i / s.rotary_dim);
        cos.set({p, i, 0, 0}, std::cos(theta)), sin.set({p, i, 0, 0}, std::sin(theta));
      }
  }
}

Index KvCase::at(int64_t b, int64_t pos, int64_t h, int64_t d) const {
  if (s.page_size) return {pages[b * max_pages + pos / s.page_size], pos % s.page_size, h, d};
  return {rows[b], pos, h, d};
}
Index KvCase::q_at(int64_t b, int64_t i, int64_t h, int64_t d) const {
  if (s.lens_q.empty()) return {b, i, h, d};
  return {q_start[b] + i, h, d, 0};
}
Index KvCase::new_at(int64_t b, int64_t i, int64_t h, int64_t d) const {
  if (s.lens_new.empty()) return {b, i, h, d};
  return {new_start[b] + i, h, d, 0};
}
Index KvCase::lse_at(int64_t b, int64_t h, int64_t i) const {
  if (s.lens_q.empty()) return {b, h, i, 0};
  return {h, q_start[b] + i, 0, 0};
}

Result KvCase::fresh_outputs() const {
  Result r;
  if (s.lens_q.empty()) {
    r.out = HostTensor::contiguous(s.dtype, {s.batch, s.len_q, s.hq, s.d});
    r.lse = HostTensor::contiguous(DType::kFloat32, {s.batch, s.hq, s.len_q});
  } else {
    r.out = HostTensor::contiguous(s.dtype, {q.dim(0), s.hq, s.d});
    r.lse = HostTensor::contiguous(DType::kFloat32, {s.hq, q.dim(0)});
  }
  r.out.poison(), r.lse.poison();
  return r;
}

KvCache KvCase::args(const std::function<TensorRef(const HostTensor&)>& view,
                     std::vector<TensorRef>* refs) const {
  refs->assign(12, TensorRef{});
  auto opt = [&](const HostTensor& t, bool given, int i) -> const TensorRef* {
    if (!given) return nullptr;
    (*refs)[i] = view(t);
    return &(*refs)[i];
  };
  KvCache c;
  c.k_cache = view(k_cache), c.v_cache = view(v_cache);
  c.page_table = opt(table, s.page_size != 0, 0);
  c.cache_seqlens = opt(seqlens, true, 1);
  c.cache_batch_idx = opt(batch_idx, s.batch_idx, 2);
  c.cache_leftpad = opt(leftpad, !s.leftpad.empty(), 3);
  c.k_new = opt(k_new, s.appends(), 4);
  c.v_new = opt(v_new, s.appends(), 5);
  c.rotary_cos = opt(cos, s.rotary, 6);
  c.rotary_sin = opt(sin, s.rotary, 7);
  c.rotary_interleaved = s.interleaved;
  c.cu_seqlens_q = opt(cu_q, !s.lens_q.empty(), 8);
  c.cu_seqlens_k_new = opt(cu_new, !s.lens_new.empty(), 9);
  if (!s.lens_q.empty()) c.max_seqlen_q = *std::max_element(s.lens_q.begin(), s.lens_q.end());
  return c;
}

KvCache KvCase::args() const {
  static thread_local std::vector<TensorRef> refs;
  return args([](const HostTensor& t) { return t.ref(); }, &refs);
}

void run_kvcache_cpu(KvCase& kc, Result* r, const Options& options) {
  const TensorRef lse = r->lse.ref();
  Options o = options;
  o.kernel = Kernel::kAuto;  // the CPU's kernel, whichever a GPU run of the case forces
  forward_kvcache(kc.q.ref(), kc.args(), r->out.ref(), &lse, o);
}

void check_kvcache(const KvSpec& spec, DeviceKind device, const KvRun& run) {
  KvCase kc(spec);
  const KvSpec& s = kc.s;
  const HostTensor k_before = kc.k_cache, v_before = kc.v_cache;
  Result r = kc.fresh_outputs();
  run(kc, &r, s.options);
  const int64_t half = s.rotary ? s.rotary_dim / 2 : 0;
  EXPECT_EQ(r.out.count_unwritten(), 0) << s.name() << ": out rows left unwritten";
  EXPECT_EQ(r.out.count_gaps_changed() + r.lse.count_gaps_changed(), 0)
      << s.name() << ": writes outside out / lse";

  // The cache: appended slots hold the (rotated) new rows, everything else is untouched.
  HostTensor k_want = k_before, v_want = v_before;
  std::set<int64_t> appended;  // storage positions (the same in k_cache and v_cache)
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.new_keys(b); ++i)
      for (int64_t h = 0; h < s.hkv; ++h) {
        const int64_t pos = s.seqlens[b] + i;
        std::vector<double> x(s.d);
        for (int64_t d = 0; d < s.d; ++d) x[d] = kc.k_new.get(kc.new_at(b, i, h, d));
        if (s.rotary) x = rotate(x, kc.cos, kc.sin, pos, half, s.interleaved);
        for (int64_t d = 0; d < s.d; ++d) {
          k_want.set(kc.at(b, pos, h, d), x[d]);
          v_want.set(kc.at(b, pos, h, d), kc.v_new.get(kc.new_at(b, i, h, d)));
          appended.insert(k_want.position(kc.at(b, pos, h, d)));
        }
      }
  if (device == DeviceKind::kCPU) {
    EXPECT_TRUE(kc.k_cache.bytes() == k_want.bytes()) << "k_cache differs from the expected append";
    EXPECT_TRUE(kc.v_cache.bytes() == v_want.bytes()) << "v_cache differs from the expected append";
  } else {
    // Against the CPU forward_kvcache on the same inputs: appended slots within one ulp, every
    // other byte (guards included) as it was.
    KvCase cpu(spec);
    Result cpu_r = cpu.fresh_outputs();
    run_kvcache_cpu(cpu, &cpu_r, s.options);
    const int64_t elems = static_cast<int64_t>(kc.k_cache.bytes().size() / dtype_size(s.dtype));
    int64_t bad_k = 0, bad_v = 0, changed = 0;
    for (int64_t n = 0; n < elems; ++n) {
      if (appended.count(n)) {
        bad_k += !within_ulp(kc.k_cache.bits_at(n), cpu.k_cache.bits_at(n), s.dtype);
        bad_v += kc.v_cache.bits_at(n) != cpu.v_cache.bits_at(n);
      } else {
        changed +=
            kc.k_cache.bits_at(n) != k_before.bits_at(n) || kc.v_cache.bits_at(n) != v_before.bits_at(n);
      }
    }
    EXPECT_EQ(bad_k, 0) << s.name() << ": appended k_cache slots off the CPU's by more than one ulp";
    EXPECT_EQ(bad_v, 0) << s.name() << ": appended v_cache slots differ from the CPU's";
    EXPECT_EQ(changed, 0) << s.name() << ": cache elements outside the appended slots changed";
  }

  // Each sequence against the oracle on its gathered keys, rotated q, the 2x rule against eager.
  const bool positional = s.options.causal || s.options.window_left >= 0 || s.options.window_right >= 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t first = s.leftpad.empty() ? 0 : s.leftpad[b], lk = s.seqlens[b] + s.new_keys(b) - first;
    const int64_t lq = s.queries(b);
    if (lq == 0) continue;
    Problem p;
    p.seqlen_q = lq, p.seqlen_k = lk, p.heads_q = s.hq, p.heads_kv = s.hkv, p.head_dim = s.d;
    p.dtype = s.dtype, p.options = s.options;
    p.options.num_splits = 0;
    Case one(p);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < s.hq; ++h) {
        std::vector<double> x(s.d);
        for (int64_t d = 0; d < s.d; ++d) x[d] = kc.q.get(kc.q_at(b, i, h, d));
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
    Result mine = test::fresh_outputs(p);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < s.hq; ++h) {
        for (int64_t d = 0; d < s.d; ++d) mine.out.set({0, i, h, d}, r.out.get(kc.q_at(b, i, h, d)));
        mine.lse.set({0, h, i, 0}, r.lse.get(kc.lse_at(b, h, i)));
      }
    const Report rep = judge(mine, one, device);
    EXPECT_TRUE(rep.ok()) << s.name() << " sequence " << b << ": " << rep.str();
  }
}

}  // namespace tileattn::test
