// kvcache.cc: tileattn._C.forward_kvcache: the arrays of a KV-cache call read as TensorRefs (the
// caches writable when new keys are appended), tileattn::forward_kvcache without the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "call.h"

namespace tileattn::python {
namespace {

struct KvArrays {
  nb::handle q, k_cache, v_cache, out, lse, k_new, v_new, cos, sin, seqlens, batch_idx, leftpad, page_table,
      cu_q, cu_new;
};

void run(const KvArrays& a, int64_t max_seqlen_q, bool rotary_interleaved, const Call& call) {
  Arrays arrays(call.u16_is_bf16);
  const bool appends = !a.k_new.is_none();
  const auto q = arrays.read(a.q, "q", false, kLayoutBLHD);
  const auto k_cache = arrays.read(a.k_cache, "k_cache", appends, kLayoutBLHD);
  const auto v_cache = arrays.read(a.v_cache, "v_cache", appends, kLayoutBLHD);
  const auto out = arrays.read(a.out, "out", true, kLayoutBLHD);
  const auto lse = arrays.read_optional(a.lse, "lse", true, kLayoutLse);
  const auto opt = [&](nb::handle h, const char* name, const char* layout) {
    return arrays.read_optional(h, name, false, layout);
  };
  const auto k_new = opt(a.k_new, "k", kLayoutBLHD), v_new = opt(a.v_new, "v", kLayoutBLHD);
  const auto cos = opt(a.cos, "rotary_cos", "[seqlen_ro, rotary_dim / 2]");
  const auto sin = opt(a.sin, "rotary_sin", "[seqlen_ro, rotary_dim / 2]");
  const auto seqlens = opt(a.seqlens, "cache_seqlens", "[batch]");
  const auto batch_idx = opt(a.batch_idx, "cache_batch_idx", "[batch]");
  const auto leftpad = opt(a.leftpad, "cache_leftpad", "[batch]");
  const auto table = opt(a.page_table, "page_table", "[batch, max_pages]");
  const auto cu_q = opt(a.cu_q, "cu_seqlens_q", "[batch + 1]");
  const auto cu_new = opt(a.cu_new, "cu_seqlens_k_new", "[batch + 1]");
  KvCache c;
  c.k_cache = k_cache, c.v_cache = v_cache;
  const auto ptr = [](const std::optional<TensorRef>& t) { return t ? &*t : nullptr; };
  c.page_table = ptr(table), c.cache_seqlens = ptr(seqlens), c.cache_batch_idx = ptr(batch_idx);
  c.cache_leftpad = ptr(leftpad), c.k_new = ptr(k_new), c.v_new = ptr(v_new),
  c.cu_seqlens_k_new = ptr(cu_new);
  c.rotary_cos = ptr(cos), c.rotary_sin = ptr(sin), c.rotary_interleaved = rotary_interleaved;
  c.cu_seqlens_q = ptr(cu_q), c.max_seqlen_q = max_seqlen_q;
  const Options options = options_of(call);
  call_library([&] { forward_kvcache(q, c, out, lse ? &*lse : nullptr, options); });
}

}  // namespace

void bind_kvcache(nb::module_& m) {
  m.def(
      "forward_kvcache",
      [](nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle out, nb::handle lse,
         nb::handle k_new, nb::handle v_new, nb::handle cos, nb::handle sin, nb::handle seqlens,
         nb::handle batch_idx, nb::handle leftpad, nb::handle page_table, nb::handle cu_q, nb::handle cu_new,
         int64_t max_seqlen_q, bool causal, std::optional<double> scale, int64_t window_left,
         int64_t window_right, double softcap, bool rotary_interleaved, int num_splits, uintptr_t stream,
         bool u16_is_bf16, bool check_indices, const std::string& kernel) {
        Call call{causal,      scale,  window_left, window_right,  softcap, stream,
                  u16_is_bf16, kernel, num_splits,  check_indices, false};
        run(KvArrays{q, k_cache, v_cache, out, lse, k_new, v_new, cos, sin, seqlens, batch_idx, leftpad,
                     page_table, cu_q, cu_new},
            max_seqlen_q, rotary_interleaved, call);
      },
      nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("out"), nb::arg("lse").none(),
      nb::arg("k_new").none(), nb::arg("v_new").none(), nb::arg("rotary_cos").none(),
      nb::arg("rotary_sin").none(), nb::arg("cache_seqlens").none(), nb::arg("cache_batch_idx").none(),
      nb::arg("cache_leftpad").none(), nb::arg("page_table").none(), nb::arg("cu_seqlens_q").none(),
      nb::arg("cu_seqlens_k_new").none(), nb::arg("max_seqlen_q") = -1, nb::kw_only(),
      nb::arg("causal") = false, nb::arg("scale").none() = nb::none(), nb::arg("window_left") = -1,
      nb::arg("window_right") = -1, nb::arg("softcap") = 0.0, nb::arg("rotary_interleaved") = true,
      nb::arg("num_splits") = 0, nb::arg("stream") = 0, nb::arg("u16_is_bf16") = false,
      nb::arg("check_indices") = false, nb::arg("kernel") = "auto",
      "Runs tileattn::forward_kvcache (the caches written in place with k_new).");
}

}  // namespace tileattn::python
