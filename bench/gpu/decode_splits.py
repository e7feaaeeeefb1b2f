"""Decode against the split count: where the split-KV decode's time goes, on one GPU.

For each decode shape (B x 1 query against Lk keys, 32 query / 8 KV heads, D = 128, bf16) and
each forced num_splits, tileattn.attention by the one timer (timer.py; plain and graph columns,
TB/s of K and V read), beside the count the heuristic picks (num_splits=0) and SDPA cuDNN. Then
a torch.profiler trace of the heuristic's calls and of cuDNN's splits the time per kernel
(attention, combine, the L2 flush) and the idle gap before each, so fixed costs show apart from
streaming.
    python bench/gpu/decode_splits.py --out decode_splits.json
"""
import argparse
import collections
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tileattn
import timer as timers


def profile(call, n=20):
    """Per kernel of `call` (the L2 flush before each, as the timer does it): its mean time and the
    mean idle gap before it, from a torch.profiler trace; printed and returned."""
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            flush.zero_()
            call()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per = collections.defaultdict(lambda: dict(us=0.0, gap_us=0.0, n=0))
    prev_end = None
    for e in kernels:
        k = per[e.name[:80]]
        k["us"] += (e.time_range.end - e.time_range.start) / n
        k["gap_us"] += (e.time_range.start - prev_end) / n if prev_end is not None else 0.0
        k["n"] += 1
        prev_end = e.time_range.end
    for name, k in sorted(per.items(), key=lambda x: -x[1]["us"]):
        print(f"    {k['us']:8.1f} us/call, idle before it {k['gap_us']:6.1f} us  ({k['n'] // n}x) {name}")
    return dict(per)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x131072,8x16384,1x32768")
    ap.add_argument("--splits", default="0,1,4,8,12,16,24,32,33,48,64,66,128")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    timer = timers.Timer(100, 10)
    rows = []
    for shape in args.shapes.split(","):
        B, Lk = (int(x) for x in shape.split("x"))
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Lk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        gbytes = 2.0 * k.numel() * k.element_size() / 1e9
        calls = {f"tileattn splits={s}": (lambda s=s: tileattn.attention(q, k, v, num_splits=s))
                 for s in (int(x) for x in args.splits.split(","))}
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

        calls["sdpa_cudnn"] = cudnn
        for name, call in calls.items():
            plain, graph = timer.time(call), timer.time_graph(call)
            row = dict(B=B, Lk=Lk, impl=name, ms=plain["ms"], graph_ms=graph["ms"], sm_mhz=plain["sm_mhz"],
                       tbps=gbytes / plain["ms"], graph_tbps=gbytes / graph["ms"])
            rows.append(row)
            print(f"{B:3d} x {Lk:6d} {name:22s} {row['tbps']:5.2f} TB/s  graph {row['graph_tbps']:5.2f}  "
                  f"({plain['ms'] * 1e3:7.1f} us)", flush=True)
        for name in ("tileattn splits=0", "sdpa_cudnn"):
            rows.append(dict(B=B, Lk=Lk, impl=f"profile {name}", kernels=profile(calls[name])))
    if args.out:
        meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    gpu=torch.cuda.get_device_name(0), commit=os.environ.get("TILEATTN_COMMIT", ""),
                    torch=torch.__version__, timer=timers.describe(100, 10))
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    with timers.bench_stream():  # one stream, graphs captured on it (timer.py)
        sys.exit(main())
