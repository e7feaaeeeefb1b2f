"""Captures torch.autograd.grad through tileattn.attention in a CUDA graph, first in its process,
as bench/gpu/timer.py does (warm-up on a side stream), under each capture_error_mode, and says
which capture fails and with what. usage: graph_probe.py [first_impl]"""
import sys
import traceback

import torch
import torch.nn.functional as F

import tileattn


def run(name, mode, shape=(2, 1024, 16, 128)):
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    if name == "tileattn":
        out = tileattn.attention(q, k, v)
    else:
        out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    call = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, capture_error_mode=mode):
            call()
        g.replay()
        torch.cuda.synchronize()
        print(f"{name:9s} {mode:12s} ok", flush=True)
    except Exception as e:
        print(f"{name:9s} {mode:12s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
        traceback.print_exc(limit=4)
        torch.cuda.synchronize()


first = sys.argv[1] if len(sys.argv) > 1 else "tileattn"
for name in (first, "tileattn", "sdpa"):
    for mode in ("global", "thread_local", "relaxed"):
        run(name, mode)
