"""CPU forward against PyTorch's CPU SDPA (its flash-attention kernel), interleaved in one process.

Each library gets the same values in its preferred layout (tileattn [B, L, H, D], SDPA
[B, H, L, D], both contiguous), under torch.no_grad; the two calls alternate, so drifting
clocks hit both alike; median of --reps after warm-up. GFLOP/s = 4*B*Hq*Lq*Lk*D (halved when
causal); decode shapes also in GB/s of K and V read.

    python bench/cpu/forward.py --out bench/results/cpu_forward.json
"""
import argparse
import datetime
import json
import statistics
import subprocess
import time

import torch

import tileattn
from backward import cpu_model

SHAPES = [  # name, B, Hq, Hkv, Lq, Lk, D, dtype, causal
    ("B1 H32 L2048 D128", 1, 32, 32, 2048, 2048, 128, "float32", False),
    ("B1 H32 L2048 D128", 1, 32, 32, 2048, 2048, 128, "float32", True),
    ("B1 H32 L2048 D128", 1, 32, 32, 2048, 2048, 128, "bfloat16", False),
    ("B1 H32 L2048 D128", 1, 32, 32, 2048, 2048, 128, "bfloat16", True),
    ("B1 H16 L4096 D64", 1, 16, 16, 4096, 4096, 64, "float32", True),
    ("B1 H16 L4096 D128", 1, 16, 16, 4096, 4096, 128, "float32", True),
    ("decode B8 H32 Lk8192 D128", 8, 32, 32, 1, 8192, 128, "float32", False),
    ("decode B8 H32 Lk8192 D128", 8, 32, 32, 1, 8192, 128, "bfloat16", False),
    ("GQA Hq32 Hkv8 L2048 D128", 1, 32, 8, 2048, 2048, 128, "bfloat16", True),
]


def copy_gbps(reps=5):
    """This machine's copy bandwidth: bytes read + written by torch's copy of 1 GiB, GB/s."""
    src = torch.ones(1 << 28)
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="", help="run only the shapes whose name contains this")
    args = ap.parse_args()
    rows = []
    copy = copy_gbps()
    print(f"copy bandwidth {copy:.1f} GB/s (read + write)", flush=True)
    for name, B, hq, hkv, lq, lk, d, dtype, causal in SHAPES:
        if args.only not in name:
            continue
        g = torch.Generator().manual_seed(0)
        dt = getattr(torch, dtype)
        q = torch.randn(B, lq, hq, d, generator=g).to(dt)
        k = torch.randn(B, lk, hkv, d, generator=g).to(dt)
        v = torch.randn(B, lk, hkv, d, generator=g).to(dt)
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        calls = {
            "tileattn": lambda: tileattn.attention(q, k, v, causal=causal),
            "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                                             enable_gqa=hq != hkv),
        }
        times = {n: [] for n in calls}
        with torch.no_grad():
            for rep in range(args.reps + 2):
                for n, call in calls.items():
                    t0 = time.perf_counter()
                    call()
                    if rep >= 2:
                        times[n].append((time.perf_counter() - t0) * 1e3)
        flops = 4.0 * B * hq * lq * lk * d * (0.5 if causal and lq > 1 else 1.0)
        kv_bytes = 2.0 * B * lk * hkv * d * torch.tensor([], dtype=dt).element_size()
        row = dict(shape=name, B=B, Hq=hq, Hkv=hkv, Lq=lq, Lk=lk, D=d, dtype=dtype, causal=causal)
        for n in calls:
            ms = statistics.median(times[n])
            row[n] = dict(ms=ms, gflops=flops / ms / 1e6, kv_gbps=kv_bytes / ms / 1e6, times_ms=times[n])
        row["ratio"] = row["sdpa"]["ms"] / row["tileattn"]["ms"]
        rows.append(row)
        unit = "GB/s" if lq == 1 else "GFLOP/s"
        key = "kv_gbps" if lq == 1 else "gflops"
        if lq == 1:
            row["tileattn"]["fraction_of_copy"] = row["tileattn"]["kv_gbps"] / copy
        print(f"{name:28s} {dtype:9s} {'causal' if causal else 'full  '}  tileattn {row['tileattn'][key]:7.1f}"
              f"  sdpa {row['sdpa'][key]:7.1f} {unit}  ratio {row['ratio']:.2f}", flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.out, "w") as f:
            json.dump(dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           commit=commit, torch=torch.__version__, reps=args.reps, copy_gbps=copy,
                           machine=dict(cpu=cpu_model(), threads=torch.get_num_threads(), cpu_isa=tileattn.cpu_isa()),
                           timer="time.perf_counter around each call, the two libraries alternating, median",
                           ratio="sdpa time / tileattn time (> 1: tileattn faster)", rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
