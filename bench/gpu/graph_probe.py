"""Captures torch.autograd.grad of an attention output in a CUDA graph, first in a fresh process,
with the forward on the legacy default stream ("split") or on the capture stream itself ("one"),
for tileattn and SDPA, and says which captures fail and with what. Autograd runs a backward op
on its forward's stream: with the forward on the default stream, the captured backward puts work
there and the capture is invalidated (cudaErrorStreamCaptureImplicit), whatever the op.
usage: graph_probe.py (every case, each in its own process) | graph_probe.py IMPL PLACEMENT"""
import subprocess
import sys
import traceback

import torch
import torch.nn.functional as F

CASES = [(impl, placement) for placement in ("split", "one") for impl in ("sdpa", "tileattn")]


def forward(impl, q, k, v):
    if impl == "tileattn":
        import tileattn

        return tileattn.attention(q, k, v)
    return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def probe(impl, placement, shape=(2, 1024, 16, 128)):
    stream = torch.cuda.Stream()
    home = torch.cuda.default_stream() if placement == "split" else stream
    with torch.cuda.stream(home):
        q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
        out = forward(impl, q, k, v)
        call = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        side = torch.cuda.Stream()
        side.wait_stream(home)
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        home.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=stream):
                call()
            graph.replay()
            torch.cuda.synchronize()
            print(f"{impl:9s} {placement:6s} ok", flush=True)
            return 0
        except Exception as e:
            print(f"{impl:9s} {placement:6s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            traceback.print_exc(limit=2)
            return 1


if __name__ == "__main__":
    if len(sys.argv) == 3:
        sys.exit(probe(sys.argv[1], sys.argv[2]))
    for impl, placement in CASES:
        subprocess.run([sys.executable, __file__, impl, placement], timeout=120)
