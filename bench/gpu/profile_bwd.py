"""profile_bwd.py: calls of tileattn's backward for ncu to profile (run.sh stage profile_bwd).

One shape, bf16: the forward once, then --calls backward calls with --kernel (sm90 or auto);
ncu picks the kernel by name and skips the warm-up launches.
"""
import argparse

import torch

import tileattn


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="1,16384,16,128", help="B,L,H,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--kernel", default="sm90")
    ap.add_argument("--calls", type=int, default=4)
    args = ap.parse_args()
    B, L, H, D = (int(x) for x in args.shape.split(","))
    make = lambda: torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16)
    q, k, v, dout = make(), make(), make(), make()
    out, lse = tileattn.attention(q, k, v, causal=args.causal, return_lse=True)
    for _ in range(args.calls):
        tileattn.attention_backward(dout, q, k, v, out, lse, causal=args.causal, kernel=args.kernel,
                                    deterministic=args.deterministic)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
