"""CPU backward (and forward + backward) against PyTorch's CPU SDPA, interleaved in one process.

Both run through their users' entry point, torch autograd: the forward once with the graph kept,
then ``torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)`` timed; the
implementations alternate call by call, so drifting clocks hit both alike. Median of --reps.
FLOPs as flash-attn counts them: backward 2.5x the forward's 4*B*Hq*Lq*Lk*D (halved when causal).

    python bench/cpu/backward.py --out bench/results/cpu_backward.json
"""

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import time

import torch

import tileattn
import tileattn.torch  # noqa: F401  (registers the ops)

SHAPES = [  # batch, seqlen, heads_q, heads_kv, head_dim, causal
    (1, 512, 8, 8, 64, False),
    (1, 512, 8, 8, 64, True),
    (1, 1024, 8, 8, 64, True),
    (1, 1024, 8, 8, 128, False),
    (1, 2048, 8, 8, 128, True),
    (2, 1000, 8, 2, 64, True),  # GQA, off the tile grid
]


def sdpa(q, k, v, causal):
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                            enable_gqa=group > 1).transpose(1, 2)


def ours(q, k, v, causal):
    return tileattn.attention(q, k, v, causal=causal)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    for batch, seqlen, hq, hkv, dim, causal in SHAPES:
        g = torch.Generator().manual_seed(0)
        q = torch.randn(batch, seqlen, hq, dim, generator=g).to(dtype).requires_grad_()
        k = torch.randn(batch, seqlen, hkv, dim, generator=g).to(dtype).requires_grad_()
        v = torch.randn(batch, seqlen, hkv, dim, generator=g).to(dtype).requires_grad_()
        dout = torch.randn(batch, seqlen, hq, dim, generator=g).to(dtype)
        impls = {"tileattn": ours, "sdpa": sdpa}
        outs = {name: f(q, k, v, causal) for name, f in impls.items()}
        backward_ms = {name: [] for name in impls}
        full_ms = {name: [] for name in impls}
        for rep in range(args.reps + 2):  # two warm-up rounds
            for name, f in impls.items():
                t0 = time.perf_counter()
                torch.autograd.grad(outs[name], (q, k, v), dout, retain_graph=True)
                t1 = time.perf_counter()
                torch.autograd.grad(f(q, k, v, causal), (q, k, v), dout)
                t2 = time.perf_counter()
                if rep >= 2:
                    backward_ms[name].append((t1 - t0) * 1e3)
                    full_ms[name].append((t2 - t1) * 1e3)
        flops = 4 * batch * hq * seqlen * seqlen * dim * (0.5 if causal else 1.0)
        row = dict(batch=batch, seqlen=seqlen, heads_q=hq, heads_kv=hkv, head_dim=dim, causal=causal)
        for name in impls:
            b, f = statistics.median(backward_ms[name]), statistics.median(full_ms[name])
            row[name] = dict(backward_ms=b, fwd_bwd_ms=f, backward_gflops=2.5 * flops / b / 1e6,
                             fwd_bwd_gflops=3.5 * flops / f / 1e6, backward_times_ms=backward_ms[name])
        row["backward_ratio"] = row["sdpa"]["backward_ms"] / row["tileattn"]["backward_ms"]
        row["fwd_bwd_ratio"] = row["sdpa"]["fwd_bwd_ms"] / row["tileattn"]["fwd_bwd_ms"]
        rows.append(row)
        print(f"B{batch} L{seqlen} H{hq}/{hkv} D{dim} {'causal' if causal else 'full  '}  backward ms: tileattn "
              f"{row['tileattn']['backward_ms']:8.2f}  sdpa {row['sdpa']['backward_ms']:8.2f}  (x{row['backward_ratio']:.2f})"
              f"   fwd+bwd: {row['tileattn']['fwd_bwd_ms']:8.2f} / {row['sdpa']['fwd_bwd_ms']:8.2f} "
              f"(x{row['fwd_bwd_ratio']:.2f})", flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        result = dict(
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            commit=commit, dtype=args.dtype, reps=args.reps, torch=torch.__version__,
            machine=dict(cpu=cpu_model(), threads=torch.get_num_threads(),
                         cpu_isa=tileattn.cpu_isa()),
            timer="time.perf_counter around torch.autograd.grad, implementations interleaved call by call, median",
            ratio="sdpa time / tileattn time (> 1: tileattn faster)", rows=rows)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
