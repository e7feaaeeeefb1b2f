"""GPU forward benchmark: tileattn against its eager path and PyTorch's attention backends.

All implementations run in this one process on the same inputs (bf16, [B, L, H, D]), timed
with CUDA events: median of --reps calls after --warmup calls. TFLOP/s counts 4*B*H*L*L*D,
halved for causal. Writes JSON (--out) and prints a table with ratios to SDPA FLASH and CUDNN.

The sweep is the FlashAttention papers': hidden 2048 (H = 2048 / D), B = 16384 / L,
L = 512..16384, D in {64, 128, 256} (others with --head-dims), causal off and on; plus the seed's
shape B=1, H=32, L=2048, D=128.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys

import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    import tileattn
except ImportError:  # timed through the CLI instead (--tileattn-cli)
    tileattn = None


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def torch_eager(q, k, v, causal):
    """Standard attention as written in PyTorch: S and P materialized, softmax in fp32."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    s = (qt @ kt.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        L, S = s.shape[-2:]
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L)
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return (p @ vt).transpose(1, 2)


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
            ).transpose(1, 2)

    return run


IMPLS = {
    "tileattn": lambda q, k, v, c: tileattn.attention(q, k, v, causal=c),
    "tileattn_eager": lambda q, k, v, c: tileattn.eager(q, k, v, causal=c),
    "tileattn_sm80": None,  # only through the CLI (--sm80-peer)
    # With --tileattn-cli these two are timed by `tileattn bench --device cuda` on its own
    # random inputs of the same shape (same method: CUDA events, median after warm-up).
    "torch_eager": torch_eager,
    "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
    "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
}


def cli_times(cli, shape, warmup, reps, kernel="auto", impls="tiled,eager", names=None):
    """impl name -> the row of `tileattn bench --device cuda` for one shape."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run([cli, "bench", "--device", "cuda", "--dtype", "bf16", "--seqlens", str(shape["L"]),
                        "--head-dims", str(shape["D"]), "--batch", str(shape["B"]), "--heads", str(shape["H"]),
                        "--causal", "on" if shape["causal"] else "off", "--impl", impls, "--kernel", kernel,
                        "--warmup", str(warmup), "--reps", str(reps), "--out", tmp.name],
                       check=True, capture_output=True, timeout=300)
        rows = json.load(open(tmp.name))["rows"]
    names = names or {"tiled": "tileattn", "eager": "tileattn_eager"}
    return {names[r["impl"]]: r for r in rows}


def shapes(args):
    for d in args.head_dims:
        for L in args.seqlens:
            for causal in (False, True):
                yield dict(B=max(1, args.tokens // L), H=args.hidden // d, L=L, D=d, causal=causal)
    yield dict(B=1, H=32, L=2048, D=128, causal=False, seed_shape=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--impls", default=",".join(k for k in IMPLS if k != "tileattn_sm80"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="")
    ap.add_argument("--commit", default=os.environ.get("TILEATTN_COMMIT", ""))
    ap.add_argument("--tileattn-cli", default="", help="time tileattn through this `tileattn` binary")
    ap.add_argument("--sm80-peer", action="store_true",
                    help="with --tileattn-cli: also time the sm80 kernel by name (tileattn_sm80)")
    args = ap.parse_args()
    args.seqlens = [int(x) for x in args.seqlens.split(",")]
    args.head_dims = [int(x) for x in args.head_dims.split(",")]
    impls = args.impls.split(",")
    if args.sm80_peer and "tileattn_sm80" not in impls:
        impls.insert(1, "tileattn_sm80")

    torch.manual_seed(0)
    rows = []
    for shape in shapes(args):
        B, H, L, D, causal = shape["B"], shape["H"], shape["L"], shape["D"], shape["causal"]
        q, k, v = (torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4.0 * B * H * L * L * D / (2 if causal else 1)
        reference = None
        from_cli = cli_times(args.tileattn_cli, shape, args.warmup, args.reps) if args.tileattn_cli else {}
        if args.tileattn_cli and args.sm80_peer:
            from_cli.update(cli_times(args.tileattn_cli, shape, args.warmup, args.reps, "sm80", "tiled",
                                      {"tiled": "tileattn_sm80"}))
        for name in impls:
            fn = IMPLS[name]
            row = dict(shape, impl=name)
            if name in from_cli:
                r = from_cli[name]
                if r["status"] == "ok":
                    row.update(ms=r["median_ms"], tflops=flops / r["median_ms"] / 1e9, timed_by="tileattn bench",
                               peak_extra_bytes=2 * B * H * L * L * 2 if name == "tileattn_eager" else 0)
                else:
                    row["error"] = r["status"]
                rows.append(row)
                print(f"D={D:3d} L={L:5d} B={B:2d} H={H:2d} causal={int(causal)} {name:15s} "
                      f"{row.get('tflops', 0):7.1f} TFLOP/s (cli)", file=sys.stderr, flush=True)
                continue
            try:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                out = fn(q, k, v, causal)
                torch.cuda.synchronize()
                row["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()
                if name == "tileattn_eager":  # S and P live in the library's own allocations
                    row["peak_extra_bytes"] = 2 * B * H * L * L * 2
                if reference is None:
                    reference = out.float()
                row["max_diff_vs_first"] = (out.float() - reference).abs().max().item()
                del out
                ms = time_ms(lambda: fn(q, k, v, causal), args.warmup, args.reps)
                row.update(ms=ms, tflops=flops / ms / 1e9)
            except Exception as e:  # an unsupported shape or out of memory: recorded, not fatal
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                torch.cuda.empty_cache()
            rows.append(row)
            status = f"{row['tflops']:7.1f} TFLOP/s" if "tflops" in row else row["error"]
            print(f"D={D:3d} L={L:5d} B={B:2d} H={H:2d} causal={int(causal)} {name:15s} {status}",
                  file=sys.stderr, flush=True)
        del q, k, v
        torch.cuda.empty_cache()

    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(0),
        torch=torch.__version__,
        cudnn=torch.backends.cudnn.version(),
        tileattn=tileattn.__version__ if tileattn else "cli",
        commit=args.commit,
        host=platform.node(),
        dtype="bf16",
        flops="4*B*H*L*L*D, halved when causal",
        timing=f"median of {args.reps} after {args.warmup} warm-up calls, CUDA events",
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print_table(rows, impls)


def print_table(rows, impls):
    by = {}
    for r in rows:
        by.setdefault((r["D"], r["L"], r["B"], r["H"], r["causal"]), {})[r["impl"]] = r.get("tflops")
    short = {"tileattn": "ours", "tileattn_sm80": "ours-sm80", "tileattn_eager": "our-eager", "torch_eager": "torch-eager",
             "sdpa_flash": "FLASH", "sdpa_efficient": "EFFIC", "sdpa_cudnn": "CUDNN"}
    head = f"{'D':>3} {'L':>5} {'B':>2} {'H':>2} {'c':>1} " + " ".join(f"{short[i]:>11}" for i in impls)
    head += "  ours/FLASH ours/CUDNN"
    print("\nTFLOP/s (bf16, H200 forward)")
    print(head)
    for key, vals in by.items():
        cells = " ".join(f"{vals[i]:11.1f}" if vals.get(i) else f"{'-':>11}" for i in impls)
        ours, fl, cu = vals.get("tileattn"), vals.get("sdpa_flash"), vals.get("sdpa_cudnn")
        r1 = f"{ours / fl:10.2f}" if ours and fl else f"{'-':>10}"
        r2 = f"{ours / cu:10.2f}" if ours and cu else f"{'-':>10}"
        print(f"{key[0]:3d} {key[1]:5d} {key[2]:2d} {key[3]:2d} {int(key[4]):1d} {cells}  {r1} {r2}")


if __name__ == "__main__":
    main()
