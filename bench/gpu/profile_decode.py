"""profile_decode.py: decode calls for ncu to compare (run.sh stage profile_decode).

One decode shape (bf16, one query, 32 query heads on 8 KV heads, D = 128): --calls calls of
tileattn.attention or of SDPA's cuDNN backend, each inside an NVTX range named after the
implementation, after a 256 MiB read that evicts K and V from L2 (ncu also flushes the caches
before each kernel it profiles). ncu profiles the kernels inside the ranges (--nvtx-include
"<impl>/"): how many DRAM bytes they read and at what share of the peak, next to their duration.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tileattn


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--impl", choices=["tileattn", "cudnn"], default="tileattn")
    ap.add_argument("--shape", default="1,131072", help="B,Lk")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    B, Lk = (int(x) for x in args.shape.split(","))
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Lk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    flush = torch.randn(64 << 20, device="cuda")
    if args.impl == "tileattn":
        call = lambda: tileattn.attention(q, k, v)
    else:
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    for _ in range(args.calls):
        flush.sum()
        torch.cuda.nvtx.range_push(args.impl)
        call()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
