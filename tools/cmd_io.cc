// cmd_io.cc: `tileattn io`: the memory-traffic model of eager against tiled over sequence lengths.
#include <cstdio>
#include <memory>

#include "args.h"
#include "commands.h"
#include "io_model.h"
#include "problem.h"
#include "table.h"

namespace tileattn::cli {
namespace {

struct IoArgs {
  std::vector<int64_t> seqlens = {512, 1024, 2048, 4096, 8192, 16384};
  int64_t block_q = kCpuBlockQ, block_k = kCpuBlockK;
  int64_t batch = 1, heads = 32, kv_heads = 0, head_dim = 128;
  std::string dtype = "fp32";
  bool causal = false;
};

int run_io(const IoArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  std::printf("tileattn io: estimated bytes moved to and from memory (model: docs/io_model.md)\n");
  std::printf("problem  B=%lld Hq=%lld Hkv=%lld D=%lld %s, %s; tiles Br=%lld (query) x Bc=%lld (key)\n",
              static_cast<long long>(a.batch), static_cast<long long>(a.heads),
              static_cast<long long>(a.kv_heads > 0 ? a.kv_heads : a.heads),
              static_cast<long long>(a.head_dim), dtype_name(dtype), a.causal ? "causal" : "not causal",
              static_cast<long long>(a.block_q), static_cast<long long>(a.block_k));
  std::printf("eager    Q, K read; S written, read; P written, read; V read; O, LSE written\n");
  std::printf("tiled    Q read once; K, V read once per query tile; O, LSE written once\n\n");

  Table table({"L", "eager read", "eager written", "eager total", "tiled read", "tiled written",
               "tiled total", "eager/tiled", "tiled, K/V once", "eager/that"});
  for (int64_t L : a.seqlens) {
    const Shape shape{a.batch, a.heads, a.kv_heads > 0 ? a.kv_heads : a.heads, L, L, a.head_dim};
    const Traffic e = eager_traffic(shape, dtype);
    const Traffic t = tiled_traffic(shape, dtype, a.causal, a.block_q, a.block_k);
    const Traffic floor = tiled_traffic_kv_once(shape, dtype);
    table.add_row({std::to_string(L), format_bytes(e.read), format_bytes(e.written), format_bytes(e.total()),
                   format_bytes(t.read), format_bytes(t.written), format_bytes(t.total()),
                   format("%.1fx", static_cast<double>(e.total()) / static_cast<double>(t.total())),
                   format_bytes(floor.total()),
                   format("%.1fx", static_cast<double>(e.total()) / static_cast<double>(floor.total()))});
  }
  table.print(stdout);
  std::printf(
      "\neager/tiled: no reuse through caches is counted, so each query tile reads its head's K and V\n"
      "again. tiled, K/V once: the floor when K and V stay in cache across a head's query tiles (on the\n"
      "CPU they do: one head's K and V are L x D x 2 elements); eager's S and P cannot, for long L.\n");
  return 0;
}

}  // namespace

Command add_io(CLI::App& app) {
  auto args = std::make_shared<IoArgs>();
  CLI::App* sub = app.add_subcommand("io", "Memory-traffic estimate: eager (S and P in memory) vs tiled");
  sub->add_option("--seqlens", args->seqlens, "sequence lengths (Lq = Lk), comma-separated")
      ->delimiter(',')
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--block-q", args->block_q, "query rows per tile (Br)")
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--block-k", args->block_k, "keys per tile (Bc)")
      ->check(positive_int())
      ->capture_default_str();
  sub->add_option("--batch", args->batch, "batch size B")->check(positive_int())->capture_default_str();
  sub->add_option("--heads", args->heads, "query heads H")->check(positive_int())->capture_default_str();
  sub->add_option("--kv-heads", args->kv_heads,
                  "key/value heads (default: --heads; only the K/V-once floor uses it)")
      ->check(positive_int());
  sub->add_option("--head-dim", args->head_dim, "head dimension D")
      ->check(positive_int())
      ->capture_default_str();
  add_dtype_flag(*sub, &args->dtype, "element type of Q, K, V, S, P, O (default fp32)");
  sub->add_flag("--causal", args->causal, "causal mask (tiled skips key tiles above the diagonal)");
  return {sub, [args] { return run_io(*args); }};
}

}  // namespace tileattn::cli
