// cmd_io.cc: `tileattn io`: the memory-traffic model of eager against tiled over sequence lengths.
#include <cstdio>
#include <memory>

#include "args.h"
#include "commands.h"
#include "io_model.h"
#include "machine.h"
#include "problem.h"
#include "table.h"

namespace tileattn::cli {
namespace {

struct IoArgs {
  std::vector<int64_t> seqlens = {512, 1024, 2048, 4096, 8192, 16384};
  int64_t block_q = 0, block_k = 0;  // 0: the CPU kernel's own tiles for each L
  int threads = 0;                   // the CPU kernel's tile choice depends on the thread count
  int64_t batch = 1, heads = 32, kv_heads = 0, head_dim = 128;
  std::string dtype = "fp32", kernel = "cpu";
  bool causal = false;
};

// The tiles for one row: the flags when given, else the kernel's own for this shape.
Tiles tiles_for(const IoArgs& a, const Shape& shape) {
  Tiles t = a.kernel == "cpu"    ? cpu_tiles(shape, thread_count(a.threads))
            : a.kernel == "sm90" ? gpu_tiles(shape, Kernel::kCudaSm90)
                                 : gpu_tiles(shape, Kernel::kCudaSm80);
  if (a.block_q > 0) t.block_q = a.block_q;
  if (a.block_k > 0) t.block_k = a.block_k;
  return t;
}

int run_io(const IoArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  const int64_t kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
  std::printf("tileattn io: estimated bytes moved to and from memory (model: docs/io_model.md)\n");
  std::printf("problem  B=%lld Hq=%lld Hkv=%lld D=%lld %s, %s; tiles Br x Bc of the %s kernel%s\n",
              static_cast<long long>(a.batch), static_cast<long long>(a.heads),
              static_cast<long long>(kv_heads), static_cast<long long>(a.head_dim), dtype_name(dtype),
              a.causal ? "causal" : "not causal",
              a.kernel == "cpu"    ? "CPU"
              : a.kernel == "sm90" ? "GPU (sm90)"
                                   : "GPU (sm80)",
              a.block_q > 0 || a.block_k > 0 ? ", as overridden by --block-q/--block-k" : "");
  std::printf("eager    Q, K read; S written, read; P written, read; V read; O, LSE written\n");
  std::printf("tiled    Q read once; K, V read once per query tile; O, LSE written once\n\n");

  Table table({"L", "Br x Bc", "eager read", "eager written", "eager total", "tiled read", "tiled written",
               "tiled total", "eager/tiled", "tiled, K/V once", "eager/that"});
  for (int64_t L : a.seqlens) {
    const Shape shape{a.batch, a.heads, kv_heads, L, L, a.head_dim};
    const Tiles tiles = tiles_for(a, shape);
    const Traffic e = eager_traffic(shape, dtype);
    const Traffic t = tiled_traffic(shape, dtype, a.causal, tiles);
    const Traffic floor = tiled_traffic_kv_once(shape, dtype);
    table.add_row({std::to_string(L), std::to_string(tiles.block_q) + " x " + std::to_string(tiles.block_k),
                   format_bytes(e.read), format_bytes(e.written), format_bytes(e.total()),
                   format_bytes(t.read), format_bytes(t.written), format_bytes(t.total()),
                   format("%.1fx", static_cast<double>(e.total()) / static_cast<double>(t.total())),
                   format_bytes(floor.total()),
                   format("%.1fx", static_cast<double>(e.total()) / static_cast<double>(floor.total()))});
  }
  table.print(stdout);
  std::printf(
      "\neager/tiled: no reuse through caches is counted, so each query tile reads its head's K and V\n"
      "again; for long L the ratio tends to 2 Br / D. tiled, K/V once: the floor when K and V stay in\n"
      "cache across a head's query tiles (one head's K and V are 2 x L x D elements); eager's S and P\n"
      "are far larger than any cache at long L.\n");
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
  sub->add_option("--kernel", args->kernel,
                  "whose tiles to model: cpu (this machine's threads), gpu (= sm80) or sm90")
      ->check(one_of({"cpu", "gpu", "sm80", "sm90"}))
      ->capture_default_str();
  add_threads_flag(*sub, &args->threads);
  sub->add_option("--block-q", args->block_q, "query rows per tile, Br (default: the kernel's)")
      ->check(positive_int());
  sub->add_option("--block-k", args->block_k, "keys per tile, Bc (default: the kernel's)")
      ->check(positive_int());
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
