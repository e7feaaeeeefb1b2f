"""GPU forward benchmark: tileattn beside PyTorch's attention backends, in one process.

Every implementation is called through the entry point its users call (tileattn through
`tileattn.attention`, PyTorch through `F.scaled_dot_product_attention` with one backend
forced, or its eager formula) on the same random-normal bf16 inputs in [B, L, H, D] storage
(SDPA gets the `.transpose(1, 2)` views a model hands it), and timed by one timer
(bench/gpu/timer.py: L2 flushed before each call, no sync between calls, median of >= 100),
in two columns: plain calls, and replays of a captured CUDA graph.

Suites (--suites):
  forward   the FlashAttention papers' sweep: hidden 2048 (H = 2048 / D), B = 16384 / L,
            L = 512..16k, D in {64, 128, 256}, causal off and on; plus the seed shape B=1,
            H=32, L=2048, D=128. TFLOP/s = 4*B*H*L*L*D, halved when causal.
  decode    B x 1 query against Lk keys, 32 query heads on 8 KV heads, D = 128. TB/s = bytes of
            K and V read / time.
  overhead  a tiny problem: host CPU time per call, and the GPU's idle time between calls.
  gap       tileattn at D=128, L=16k through the binding and the CLI, timed several ways.
  varlen    packed batches of mixed lengths (16k tokens) beside the dense kernel on the same
            sequences.
  backward  the forward sweep's shapes through torch autograd: the backward alone and forward +
            backward, beside SDPA's backends (bench/gpu/backward.py).
  varlen_backward  the varlen suite's packed batches through attention_varlen_backward on the
            sm80 and sm90 kernels, beside the dense sm90 backward on the same sequences.
  kvcache   a decoding step through flash_attn_with_kvcache: contiguous and paged caches
            (pages of 16, 64, 256), and the step with its appended token and rotary
            (bench/gpu/kvcache.py).
Writes JSON (--out) and prints tables last, with ratios to SDPA's backends.
"""
import argparse
import datetime
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import backward as backward_bench
import kvcache as kvcache_bench
from progress import Rows
import read_ceiling
import timer as timers
import tileattn


def torch_eager(q, k, v, causal):
    """Standard attention as written in PyTorch: S and P materialized, softmax in fp32."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    if group > 1:
        kt, vt = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)

    def call():
        s = (qt @ kt.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        if causal:
            L, S = s.shape[-2:]
            mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L)
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        return (p @ vt).transpose(1, 2)

    return call


class Impl:
    """How to call one implementation: make(q, k, v, causal) -> a call; context() is entered
    around all its calls (SDPA's backend choice, entered once so its cost is not timed)."""

    def __init__(self, name, make, context=None, eager=False, attention=True):
        self.name, self.make, self.eager, self.attention = name, make, eager, attention
        self.context = context or (lambda: _Nothing())


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _tileattn(kernel="auto", **kwargs):
    return lambda q, k, v, c: (lambda: tileattn.attention(q, k, v, causal=c, kernel=kernel, **kwargs))


def _sdpa_call(q, k, v, causal):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    gqa = q.shape[2] != k.shape[2]
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa).transpose(1, 2)


def _sdpa(name, backend):
    return Impl(name, _sdpa_call, context=lambda: sdpa_kernel(backend))


IMPLS = {
    i.name: i
    for i in [
        Impl("tileattn", _tileattn()),
        Impl("tileattn_sm80", _tileattn("sm80")),
        Impl("tileattn_nosplit", _tileattn(num_splits=1)),  # decode: split-KV off
        Impl("tileattn_eager", lambda q, k, v, c: (lambda: tileattn.eager(q, k, v, causal=c)), eager=True),
        Impl("torch_eager", torch_eager, eager=True),
        _sdpa("sdpa_flash", SDPBackend.FLASH_ATTENTION),
        _sdpa("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
        _sdpa("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
        Impl("sdpa_default", _sdpa_call),  # SDPA's own backend choice
        # decode: a plain read of K and V (read_ceiling.py), the ceiling under the same timer
        Impl("read_kv", lambda q, k, v, c: read_ceiling.read_kv(q, k, v, c), attention=False),
    ]
}
SHORT = {"tileattn_core": "ours-core", "tileattn": "ours", "tileattn_sm80": "ours-sm80", "tileattn_sm80bwd": "sm80-bwd", "tileattn_sm90bwd": "ours-sm90", "tileattn_sm90det": "sm90-det", "tileattn_nosplit": "ours-1split", "read_kv": "read-KV", "tileattn_eager": "our-eager", "torch_eager": "torch-eager",
         "sdpa_flash": "FLASH", "sdpa_efficient": "EFFIC", "sdpa_cudnn": "CUDNN", "sdpa_default": "SDPA"}


def release_memory():
    """Frees what the last measurement left in torch's caches (graph pools included), so that
    tileattn's eager path, which allocates from CUDA's own pool, finds the memory free."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def measure(timer, impl, q, k, v, causal, graph=True):
    """One row's timings of impl (both columns), or the error that stopped it. The eager
    baselines get no graph column: capturing S and P needs their memory twice over."""
    graph = graph and not impl.eager
    row = {}
    try:
        with impl.context():
            call = impl.make(q, k, v, causal)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = call()
            torch.cuda.synchronize()
            row["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()
            row["out"] = out
            for key, value in timer.time(call).items():
                row[key] = value
            if graph:
                try:
                    for key, value in timer.time_graph(call).items():
                        row["graph_" + key] = value
                except Exception as e:  # not capturable: recorded, the plain column stands
                    row["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    torch.cuda.synchronize()
    except Exception as e:  # an unsupported shape or out of memory: recorded, not fatal
        row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    release_memory()
    return row


def run_rows(timer, shapes, impls, inputs, rate, label, eager_max_len):
    rows = Rows()
    for shape in shapes:
        q, k, v = inputs(shape)
        first = None
        for name in (i for i in impls if i in IMPLS):  # the backward suite's own names skipped here
            impl = IMPLS[name]
            if impl.eager and shape.get("L", 0) > eager_max_len:
                continue
            r = measure(timer, impl, q, k, v, shape.get("causal", False))
            out = r.pop("out", None)
            if out is not None and impl.attention:
                if first is None:
                    first = out.float()
                r["max_diff_vs_first"] = (out.float() - first).abs().max().item()
                del out
            for col in ("", "graph_"):
                if col + "ms" in r:
                    r[col + rate[0]] = rate[1](shape) / r[col + "ms"]
            rows.append(dict(shape, impl=name, **r))
            status = r.get("error") or (f"{r[rate[0]]:8.2f} {label}  graph {r.get('graph_' + rate[0], float('nan')):8.2f}"
                                        f"  {r.get('sm_mhz')} MHz {r.get('watts')} W {r.get('graph_error', '')[:60]}")
            print(f"{shape} {name:15s} {status}", file=sys.stderr, flush=True)
        del q, k, v, first
        release_memory()
    return rows


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def forward_suite(args, timer):
    shapes = [dict(suite="forward", B=max(1, args.tokens // L), H=args.hidden // d, L=L, D=d, causal=c)
              for d in args.head_dims for L in args.seqlens for c in (False, True)]
    shapes.append(dict(suite="forward", B=1, H=32, L=2048, D=128, causal=False, seed_shape=True))
    flops = lambda s: 4.0 * s["B"] * s["H"] * s["L"] ** 2 * s["D"] / (2 if s["causal"] else 1) / 1e9
    inputs = lambda s: tuple(randn(s["B"], s["L"], s["H"], s["D"]) for _ in range(3))
    return run_rows(timer, shapes, args.impls, inputs, ("tflops", flops), "TFLOP/s", args.eager_max_len)


DECODE_SHAPES = [(1, 4096), (1, 32768), (1, 131072), (8, 16384), (8, 131072), (64, 4096), (64, 32768)]


def decode_suite(args, timer):
    shapes = [dict(suite="decode", B=b, Lq=1, Lk=lk, Hq=32, Hkv=8, D=128) for b, lk in DECODE_SHAPES]
    kv_bytes = lambda s: 2.0 * s["B"] * s["Lk"] * s["Hkv"] * s["D"] * 2 / 1e9  # K and V, bf16
    inputs = lambda s: (randn(s["B"], s["Lq"], s["Hq"], s["D"]), randn(s["B"], s["Lk"], s["Hkv"], s["D"]),
                        randn(s["B"], s["Lk"], s["Hkv"], s["D"]))
    impls = [i for i in args.impls if i in IMPLS and not IMPLS[i].eager]
    if "tileattn" in impls:
        impls.insert(impls.index("tileattn") + 1, "tileattn_nosplit")
    impls.append("read_kv")  # not an attention: the ceiling of the row's bytes
    return run_rows(timer, shapes, impls, inputs, ("tbps", kv_bytes), "TB/s", 0)


VARLEN_MIXES = {
    "uniform 8x2048": [2048] * 8,
    "mixed 8k..64": [8192, 4096, 2048, 1024, 512, 256, 128, 64, 64],
}


def varlen_suite(args, timer):
    """Packed batches of 16k tokens (bf16, D=128, 32 query heads on 8 KV heads) through
    tileattn.flash_attn_varlen_func, beside the dense kernel on the same sequences (one dense
    call per length, timed the same way): TFLOP/s over the sum of 4 L^2 H D (halved when causal)."""
    Hq, Hkv, D = 32, 8, 128
    rows = Rows()
    for mix, lens in VARLEN_MIXES.items():
        for causal in (False, True):
            flops = sum(4.0 * L * L * Hq * D for L in lens) / (2 if causal else 1) / 1e9
            total = sum(lens)
            q, k, v = randn(total, Hq, D), randn(total, Hkv, D), randn(total, Hkv, D)
            cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
            shape = dict(suite="varlen", mix=mix, causal=causal, tokens=total)
            call = lambda: tileattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
            varlen = timer.time(call)
            graph = timer.time_graph(call)
            # The dense kernel on each length of the mix (identical lengths measured once).
            dense_ms = 0.0
            for L in sorted(set(lens)):
                n = lens.count(L)
                dq, dk, dv = randn(n, L, Hq, D), randn(n, L, Hkv, D), randn(n, L, Hkv, D)
                dense_ms += timer.time(lambda: tileattn.attention(dq, dk, dv, causal=causal))["ms"]
                del dq, dk, dv
            rows.append(dict(shape, impl="tileattn", ms=varlen["ms"], tflops=flops / varlen["ms"],
                             graph_ms=graph["ms"], graph_tflops=flops / graph["ms"], sm_mhz=varlen["sm_mhz"]))
            rows.append(dict(shape, impl="tileattn_dense", ms=dense_ms, tflops=flops / dense_ms))
            print(rows[-2], rows[-1], file=sys.stderr, flush=True)
            del q, k, v
            release_memory()
    return rows


def overhead_suite(args, timer, calls=2000):
    """Host CPU time per call and the GPU's idle time between back-to-back calls at a tiny shape:
    per call, the GPU span of `calls` plain calls minus that of the same calls replayed from a
    graph (which has no host work between them)."""
    shape = dict(suite="overhead", B=1, L=128, H=8, D=64, causal=False)
    q, k, v = (randn(1, 128, 8, 64) for _ in range(3))
    out = torch.empty_like(q)
    # The compiled core alone (its output allocated once): the C++ path and the binding, without
    # tileattn.attention's Python checks and allocation.
    core = Impl("tileattn_core", lambda q, k, v, c: (
        lambda: tileattn._C.forward(q, k, v, out, None, stream=torch.cuda.current_stream().cuda_stream)))
    rows = Rows()
    for name in ["tileattn", "tileattn_core", "sdpa_default", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]:
        impl = core if name == "tileattn_core" else IMPLS[name]
        row = dict(shape, impl=name)
        try:
            with impl.context():
                call = impl.make(q, k, v, False)
                for _ in range(100):
                    call()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                wall, cpu = time.perf_counter(), time.thread_time()
                start.record()
                for _ in range(calls):
                    call()
                end.record()
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                torch.cuda.synchronize()
                row["host_cpu_us"] = 1e6 * cpu / calls
                row["host_wall_us"] = 1e6 * wall / calls
                row["gpu_span_us"] = 1e3 * start.elapsed_time(end) / calls
                graph = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    call()
                torch.cuda.current_stream().wait_stream(side)
                with torch.cuda.graph(graph, stream=torch.cuda.current_stream()):
                    for _ in range(20):
                        call()
                graph.replay()
                torch.cuda.synchronize()
                start.record()
                for _ in range(calls // 20):
                    graph.replay()
                end.record()
                torch.cuda.synchronize()
                row["graph_span_us"] = 1e3 * start.elapsed_time(end) / calls
                row["gpu_idle_us"] = row["gpu_span_us"] - row["graph_span_us"]
                del graph
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    return rows


def gap_suite(args, timer):
    """tileattn at D=128, L=16k, B=1, H=16 (bf16, non-causal) timed several ways, to find what
    made the CLI and the binding disagree (docs/kernels/sm90.md)."""
    B, L, H, D = 1, 16384, 16, 128
    shape = dict(suite="gap", B=B, L=L, H=H, D=D, causal=False)
    flops = 4.0 * B * H * L * L * D / 1e9
    q, k, v = (randn(B, L, H, D) for _ in range(3))
    plain = lambda: tileattn.attention(q, k, v)
    with_lse = lambda: tileattn.attention(q, k, v, return_lse=True)
    rows = Rows()

    def add(method, result):
        rows.append(dict(shape, impl="tileattn", method=method, **result, tflops=flops / result["ms"]))
        print(rows[-1], file=sys.stderr, flush=True)

    add("binding, harness timer", timer.time(plain))
    add("binding, harness timer, graph", timer.time_graph(plain))
    add("binding, with lse", timer.time(with_lse))
    add("binding, no L2 flush", timers.Timer(timer.reps, timer.warmup, flush=False).time(plain))
    add("binding, 20 calls after 3", timers.Timer(20, 3).time(plain))
    # The old bench's method: one call at a time, each waited for.
    times = []
    for i in range(23):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        plain()
        e.record()
        e.synchronize()
        if i >= 3:
            times.append(s.elapsed_time(e))
    add("binding, sync per call, 20 after 3", dict(ms=statistics.median(times)))
    if args.tileattn_cli:
        for lse, reps, warmup in (("off", 100, 10), ("on", 100, 10), ("off", 20, 3)):
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                subprocess.run([args.tileattn_cli, "bench", "--device", "cuda", "--dtype", "bf16", "--seqlens", str(L),
                                "--head-dims", str(D), "--batch", str(B), "--heads", str(H), "--causal", "off",
                                "--impl", "tiled", "--lse", lse, "--reps", str(reps), "--warmup", str(warmup),
                                "--out", tmp.name], check=True, capture_output=True, timeout=300)
                r = json.load(open(tmp.name))["rows"][0]
            add(f"CLI, lse {lse}, {reps} calls after {warmup}", dict(ms=r["median_ms"]))
    return rows


def backward_suite(args, timer):
    return backward_bench.backward_suite(args, timer, release_memory)


def varlen_backward_suite(args, timer):
    return backward_bench.varlen_backward_suite(args, timer, VARLEN_MIXES, release_memory)


def kvcache_suite(args, timer):
    return kvcache_bench.kvcache_suite(args, timer, DECODE_SHAPES, release_memory)


def copy_bandwidth(timer):
    """The device's copy ceiling: bytes read + written by a 4 GiB device-to-device copy, in TB/s."""
    src = torch.empty(1 << 31, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    r = timer.time(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (1 << 32) / r["ms"] / 1e9


def print_tables(rows, copy_tbps):
    def table(suite, keys, rate, impls):
        sel = [r for r in rows if r["suite"] == suite]
        if not sel:
            return
        by = {}
        for r in sel:
            by.setdefault(tuple(r[k] for k in keys), {})[r["impl"]] = r
        present = [i for i in impls if any(i in v for v in by.values())]
        print(f"\n{suite}: {rate} (bf16); 'g' = CUDA-graph replay")
        print(" ".join(f"{k:>6}" for k in keys) + " " + " ".join(f"{SHORT[i]:>11}" for i in present)
              + "  ours/CUDNN ours/CUDNN(g) ours/FLASH")
        for key, vals in by.items():
            def cell(i, col=""):
                return vals.get(i, {}).get(col + rate)
            cells = " ".join(f"{cell(i):11.1f}" if cell(i) else f"{'-':>11}" for i in present)
            ratio = lambda a, b: f"{a / b:10.2f}" if a and b else f"{'-':>10}"
            print(" ".join(f"{int(x):>6}" for x in key) + " " + cells + "  "
                  + ratio(cell("tileattn"), cell("sdpa_cudnn")) + "  "
                  + ratio(cell("tileattn", "graph_"), cell("sdpa_cudnn", "graph_")) + " "
                  + ratio(cell("tileattn"), cell("sdpa_flash")))

    print("\n#### tables")
    impls = list(IMPLS)
    table("forward", ("D", "L", "B", "H", "causal"), "tflops", impls)
    table("decode", ("B", "Lk"), "tbps", impls)
    if copy_tbps:
        print(f"(copy ceiling {copy_tbps:.2f} TB/s)")
    for r in rows:
        if r["suite"] == "varlen" and r["impl"] == "tileattn":
            dense = next(x for x in rows if x["suite"] == "varlen" and x["impl"] == "tileattn_dense"
                         and x["mix"] == r["mix"] and x["causal"] == r["causal"])
            print(f"varlen {r['mix']:16s} causal={int(r['causal'])}: {r['tflops']:6.1f} TFLOP/s "
                  f"(graph {r['graph_tflops']:6.1f}), dense kernel on the same sequences {dense['tflops']:6.1f}: "
                  f"{r['tflops'] / dense['tflops']:.3f}x")
    backward_bench.print_table(rows, SHORT)
    kvcache_bench.print_table(rows)
    over = [r for r in rows if r["suite"] == "overhead"]
    if over:
        print("\noverhead (B=1 L=128 H=8 D=64): us per call")
        for r in over:
            print(f"  {r['impl']:15s} " + (r.get("error") or
                  f"host cpu {r['host_cpu_us']:6.1f}  host wall {r['host_wall_us']:6.1f}  gpu idle {r['gpu_idle_us']:6.1f}"))
    for r in rows:
        if r["suite"] == "gap":
            print(f"gap: {r['method']:40s} {r['tflops']:6.1f} TFLOP/s  sm {r.get('sm_mhz')} MHz  {r.get('watts')} W")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default="gap,forward,decode,varlen,overhead,backward,kvcache")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--impls", default=",".join(i for i in IMPLS if i not in ("sdpa_default", "tileattn_nosplit", "read_kv")))
    ap.add_argument("--eager-max-len", type=int, default=4096,
                    help="eager baselines only up to this L (past it S and P only grow)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--flush", default="zero", choices=("zero", "read"),
                    help="how L2 is flushed before each call (timer.py): zeroing or reading a buffer")
    ap.add_argument("--out", default="")
    ap.add_argument("--commit", default=os.environ.get("TILEATTN_COMMIT", ""))
    ap.add_argument("--tileattn-cli", default="", help="the `tileattn` binary, for the gap suite")
    args = ap.parse_args()
    args.seqlens = [int(x) for x in args.seqlens.split(",")]
    args.head_dims = [int(x) for x in args.head_dims.split(",")]
    args.impls = args.impls.split(",")
    suites = args.suites.split(",")

    torch.manual_seed(0)
    timer = timers.Timer(args.reps, args.warmup, flush=args.flush)
    rows = []
    copy_tbps = copy_bandwidth(timer) if "decode" in suites else None
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(0),
        torch=torch.__version__,
        cudnn=torch.backends.cudnn.version(),
        tileattn=tileattn.__version__,
        commit=args.commit,
        host=platform.node(),
        dtype="bf16",
        timer=timers.describe(args.reps, args.warmup, args.flush),
        flops="4*B*H*L*L*D, halved when causal (forward); backward 2.5x, forward + backward 3.5x; "
              "decode: TB/s of K and V bytes read",
        copy_tbps=copy_tbps,
        entry_points="tileattn.attention; F.scaled_dot_product_attention under sdpa_kernel(backend); "
                     "torch eager formula; tileattn.eager",
        suite_errors={},
    )
    running = [[]]  # the running suite's rows, as they come (progress.py)

    def write(partial=None):  # the finished suites' rows and the running one's so far
        if partial is not None:
            running[0] = partial
        if args.out:
            with open(args.out + ".part", "w") as f:
                json.dump(dict(meta=meta, rows=rows + list(running[0])), f, indent=1)
            os.replace(args.out + ".part", args.out)

    Rows.hook = write  # the JSON rewritten after every row: a call cut off mid-suite keeps them
    for suite in suites:
        running[0] = []
        try:
            rows += globals()[suite + "_suite"](args, timer)
        except Exception as e:
            rows += running[0]  # what the suite measured before it failed
            meta["suite_errors"][suite] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"suite {suite} failed: {meta['suite_errors'][suite]}", file=sys.stderr, flush=True)
            release_memory()
        running[0] = []
        write()
    print_tables(rows, copy_tbps)
    return 1 if meta["suite_errors"] else 0


if __name__ == "__main__":
    with timers.bench_stream():  # one stream, graphs captured on it (timer.py)
        sys.exit(main())
