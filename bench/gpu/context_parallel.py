"""Context parallelism on several GPUs: ring attention (zigzag causal) over NCCL against one GPU.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node N bench/gpu/context_parallel.py --out cp.json

Causal, bf16, D = 128, 32 query heads on 8 KV heads, at each --seqlens L (default 131072,
262144, 1048576 where memory allows): rank 0 first times the whole sequence on its own GPU, then
all ranks time tileattn.distributed.ring_attention on their zigzag shards, with the bench's timer (bench/gpu/timer.py: L2 flushed, median) around each call, a barrier before
each. Throughput = 4 * B * H * L * L * D / 2 / time; speed-up and per-GPU efficiency against the
one-GPU run; with --backward, forward + backward too (needs the CUDA backward build).
"""
import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import timer as timers  # noqa: E402
import tileattn  # noqa: E402
import tileattn.distributed as cp  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", default="131072,262144,1048576")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    timer = timers.Timer(args.reps, 3)
    hq, hkv, d, rows = 32, 8, 128, []
    for L in (int(x) for x in args.seqlens.split(",")):
        row = dict(L=L, world=world, Hq=hq, Hkv=hkv, D=d, causal=True)
        flops = 4.0 * hq * L * L * d / 2 / 1e9
        try:
            g = torch.Generator(device="cuda").manual_seed(0)
            make = lambda h: torch.randn(1, L, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
            q, k, v = make(hq), make(hkv), make(hkv)
            if rank == 0:
                try:
                    row["one_gpu_ms"] = timer.time(lambda: tileattn.attention(q, k, v, causal=True))["ms"]
                except torch.cuda.OutOfMemoryError:
                    row["one_gpu_ms"] = None
            shards = [cp.zigzag_shard(x, rank, world).contiguous() for x in (q, k, v)]
            del q, k, v
            torch.cuda.empty_cache()
            def call():
                dist.barrier()
                return cp.ring_attention(*shards, causal=True)

            row["ring_ms"] = timer.time(call)["ms"]
            if args.backward:
                ys = [x.clone().requires_grad_() for x in shards]
                dout = torch.randn_like(ys[0])
                row["ring_fwd_bwd_ms"] = timer.time(
                    lambda: torch.autograd.grad(cp.ring_attention(*ys, causal=True), ys, dout))["ms"]
            if row.get("one_gpu_ms"):
                row["speedup"] = row["one_gpu_ms"] / row["ring_ms"]
                row["efficiency"] = row["speedup"] / world
            row["ring_tflops"] = flops / row["ring_ms"]
        except Exception as e:  # out of memory at the longest lengths: recorded
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        rows.append(row)
        if rank == 0:
            print(row, flush=True)
    if rank == 0 and args.out:
        meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    gpu=torch.cuda.get_device_name(0), world=world, torch=torch.__version__,
                    commit=os.environ.get("TILEATTN_COMMIT", ""), timer=timers.describe(args.reps, 3) +
                    "; a barrier before each distributed call", nccl_nvls=os.environ.get("NCCL_NVLS_ENABLE"))
        with open(args.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
