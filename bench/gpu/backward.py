"""The backward suite of bench/gpu/bench.py: training's attention, through torch autograd.

Every implementation is called as a model trains with it: tileattn through `tileattn.attention`
(its autograd op), PyTorch through `F.scaled_dot_product_attention` under one forced backend, on
the forward suite's shapes (bf16, [B, L, H, D] storage, hidden 2048, 16k tokens). Two timings
per implementation, by the one timer (bench/gpu/timer.py, both columns):
  backward   torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) of one kept forward;
  fwd+bwd    the forward and that backward together.
TFLOP/s as flash-attn counts them: the backward 2.5x the forward's 4*B*H*L*L*D (halved when
causal), forward + backward 3.5x. peak_extra_bytes: the most memory a backward call allocates
beyond its gradients through torch's allocator; tileattn's workspace (fp32 dsum and lse2, 2 x B
x Hq x Lq floats) is stream-ordered CUDA memory that torch does not see, so its row also gives
workspace_bytes, that size. tileattn_sm80bwd / tileattn_sm90bwd / tileattn_sm90det: the forward
and tileattn.attention_backward(..., kernel="sm80" / "sm90" / "sm90" with deterministic=True)
called directly, one kernel whatever autograd's "auto" would choose (the sm90 backward's fp32
dQ sums, 4 x B x Hq x L x D bytes, are stream-ordered too). varlen_backward_suite: packed
batches of mixed lengths on the sm80 and sm90 kernels, beside the dense sm90 backward.
"""
import itertools
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tileattn
from progress import Rows

BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
# The backward entry's kernel and deterministic flag, called directly (not through autograd).
DIRECT = {"tileattn_sm80bwd": ("sm80", False), "tileattn_sm90bwd": ("sm90", False), "tileattn_sm90det": ("sm90", True)}
IMPLS = ["tileattn"] + list(DIRECT) + list(BACKENDS)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _forward(name, q, k, v, causal):
    if name == "tileattn":
        return lambda: tileattn.attention(q, k, v, causal=causal)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)


def measure(timer, name, q, k, v, dout, causal, release):
    row = {}
    try:
        with sdpa_kernel(BACKENDS[name]) if name in BACKENDS else _Nothing():
            if name in DIRECT:
                kernel, det = DIRECT[name]
                qd, kd, vd = (x.detach() for x in (q, k, v))
                forward = lambda: tileattn.attention(qd, kd, vd, causal=causal, return_lse=True)
                out = forward()
                bwd = lambda o: tileattn.attention_backward(dout, qd, kd, vd, *o, causal=causal, kernel=kernel,
                                                          deterministic=det)
                backward = lambda: bwd(out)
                both = lambda: bwd(forward())
            else:
                forward = _forward(name, q, k, v, causal)
                out = forward()
                backward = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                both = lambda: torch.autograd.grad(forward(), (q, k, v), dout)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            grads = backward()
            torch.cuda.synchronize()
            row["peak_extra_bytes"] = (torch.cuda.max_memory_allocated() - base
                                       - sum(g.numel() * g.element_size() for g in grads))
            row["grads"] = grads
            if name.startswith("tileattn"):
                row["workspace_bytes"] = 2 * q.shape[0] * q.shape[2] * q.shape[1] * 4
            if name in DIRECT and DIRECT[name][0] == "sm90":
                bm = 128 if q.shape[3] == 64 else 64  # the sm90 backward's query rows a step (bwd.h)
                row["workspace_bytes"] += q.shape[0] * q.shape[2] * (q.shape[1] + bm - 1) // bm * bm * q.shape[3] * 4
            for prefix, call in (("bwd_", backward), ("fwdbwd_", both)):
                for key, value in timer.time(call).items():
                    row[prefix + key] = value
                try:
                    for key, value in timer.time_graph(call).items():
                        row[prefix + "graph_" + key] = value
                except Exception as e:  # not capturable: recorded, the plain column stands
                    row[prefix + "graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    torch.cuda.synchronize()
            del out
    except Exception as e:
        row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    release()
    return row


def backward_suite(args, timer, release):
    rows = Rows()
    for d in args.head_dims:
        for L in args.seqlens:
            for causal in (False, True):
                shape = dict(suite="backward", B=max(1, args.tokens // L), H=args.hidden // d, L=L, D=d, causal=causal)
                B, H = shape["B"], shape["H"]
                make = lambda: torch.randn(B, L, H, d, device="cuda", dtype=torch.bfloat16)
                q, k, v = (make().requires_grad_() for _ in range(3))
                dout = make()
                flops = 4.0 * B * H * L * L * d / (2 if causal else 1) / 1e9
                first = None
                for name in [i for i in IMPLS if i in args.impls]:
                    r = measure(timer, name, q, k, v, dout, causal, release)
                    grads = r.pop("grads", None)
                    if grads is not None:
                        if first is None:
                            first = [g.float() for g in grads]
                        r["max_diff_vs_first"] = max((g.float() - f).abs().max().item() for g, f in zip(grads, first))
                        del grads
                    for prefix, mult in (("bwd_", 2.5), ("fwdbwd_", 3.5)):
                        for col in ("", "graph_"):
                            if prefix + col + "ms" in r:
                                r[prefix + col + "tflops"] = mult * flops / r[prefix + col + "ms"]
                    rows.append(dict(shape, impl=name, **r))
                    status = r.get("error") or (f"bwd {r['bwd_tflops']:7.1f}  fwd+bwd {r['fwdbwd_tflops']:7.1f} TFLOP/s"
                                                f"  graph {r.get('bwd_graph_tflops', float('nan')):7.1f}")
                    print(f"{shape} {name:15s} {status}", file=sys.stderr, flush=True)
                del q, k, v, dout, first
                release()
    return rows


def varlen_backward_suite(args, timer, mixes, release):
    """Packed batches of mixed lengths (the varlen suite's mixes, bf16, hidden 2048, causal off
    and on) through tileattn.attention_varlen_backward with the sm80 and the sm90 kernel (the
    latter also deterministic), beside the dense sm90 backward on the same sequences (one call
    per length, timed the same way).
    TFLOP/s: 2.5x the sum of 4 L^2 H D (halved when causal)."""
    rows = Rows()
    for d in [x for x in args.head_dims if x in (64, 128, 256)]:
        H = args.hidden // d
        for mix, lens in mixes.items():
            for causal in (False, True):
                flops = 2.5 * sum(4.0 * L * L * H * d for L in lens) / (2 if causal else 1) / 1e9
                total = sum(lens)
                make = lambda *s: torch.randn(*s, H, d, device="cuda", dtype=torch.bfloat16)
                q, k, v, dout = (make(total) for _ in range(4))
                cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
                args_v = dict(max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=causal)
                out, lse = tileattn.attention_varlen(q, k, v, cu, cu, return_lse=True, **args_v)
                shape = dict(suite="varlen_backward", mix=mix, D=d, H=H, causal=causal, tokens=total)
                first = None
                for kernel, det in (("sm80", False), ("sm90", False), ("sm90", True)):
                    impl = f"tileattn_{kernel}" + ("det" if det else "")
                    call = lambda: tileattn.attention_varlen_backward(dout, q, k, v, out, lse, cu, cu, kernel=kernel,
                                                                      deterministic=det, **args_v)
                    try:
                        grads = call()
                        if kernel == "sm80":
                            first = [g.float() for g in grads]
                        diff = (max((g.float() - f).abs().max().item() for g, f in zip(grads, first))
                                if first else None)
                        del grads
                        t = timer.time(call)
                        rows.append(dict(shape, impl=impl, ms=t["ms"], tflops=flops / t["ms"],
                                         max_diff_vs_sm80=diff))
                    except Exception as e:
                        rows.append(dict(shape, impl=impl,
                                         error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
                    print(rows[-1], file=sys.stderr, flush=True)
                # The dense sm90 backward on each length of the mix (identical lengths once).
                dense_ms = 0.0
                try:
                    for L in sorted(set(lens)):
                        n = lens.count(L)
                        dq, dk, dv, ddo = (make(n, L) for _ in range(4))
                        o, l = tileattn.attention(dq, dk, dv, causal=causal, return_lse=True)
                        dense_ms += timer.time(lambda: tileattn.attention_backward(
                            ddo, dq, dk, dv, o, l, causal=causal, kernel="sm90"))["ms"]
                        del dq, dk, dv, ddo, o, l
                    rows.append(dict(shape, impl="tileattn_sm90_dense", ms=dense_ms, tflops=flops / dense_ms))
                except Exception as e:
                    rows.append(dict(shape, impl="tileattn_sm90_dense",
                                     error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
                print(rows[-1], file=sys.stderr, flush=True)
                del q, k, v, dout, out, lse, first
                release()
    return rows


def print_table(rows, short):
    print_varlen_table(rows)
    sel = [r for r in rows if r["suite"] == "backward"]
    if not sel:
        return
    by = {}
    for r in sel:
        by.setdefault((r["D"], r["L"], r["B"], r["H"], r["causal"]), {})[r["impl"]] = r
    print("\nbackward: TFLOP/s (bf16) of the backward alone and of forward + backward; 'g' = CUDA-graph replay")
    print("     D      L      B      H causal " + " ".join(f"{short[i]:>9}" for i in IMPLS)
          + "  ours/CUDNN  ours/CUDNN(g) | fwd+bwd: " + " ".join(f"{short[i]:>9}" for i in IMPLS) + "  ours/CUDNN")
    for key, vals in by.items():
        cell = lambda i, col: vals.get(i, {}).get(col)
        ratio = lambda a, b: f"{a / b:10.2f}" if a and b else f"{'-':>10}"
        fmt = lambda x: f"{x:9.1f}" if x else f"{'-':>9}"
        print(" ".join(f"{int(x):>6}" for x in key) + " " + " ".join(fmt(cell(i, "bwd_tflops")) for i in IMPLS)
              + "  " + ratio(cell("tileattn", "bwd_tflops"), cell("sdpa_cudnn", "bwd_tflops"))
              + "     " + ratio(cell("tileattn", "bwd_graph_tflops"), cell("sdpa_cudnn", "bwd_graph_tflops"))
              + " |          " + " ".join(fmt(cell(i, "fwdbwd_tflops")) for i in IMPLS)
              + "  " + ratio(cell("tileattn", "fwdbwd_tflops"), cell("sdpa_cudnn", "fwdbwd_tflops")))


def print_varlen_table(rows):
    by = {}
    for r in rows:
        if r["suite"] == "varlen_backward":
            by.setdefault((r["D"], r["mix"], r["causal"]), {})[r["impl"]] = r.get("tflops")
    if by:
        print("\nvarlen backward: TFLOP/s (bf16); sm90 / dense sm90 on the same sequences, sm90 / sm80,"
              " deterministic sm90 / sm80")
        for (d, mix, causal), v in by.items():
            a, b, c = v.get("tileattn_sm90"), v.get("tileattn_sm80"), v.get("tileattn_sm90_dense")
            det = v.get("tileattn_sm90det")
            fmt = lambda x: f"{x:7.1f}" if x else f"{'-':>7}"
            ratio = lambda x, y: f"{x / y:6.3f}" if x and y else f"{'-':>6}"
            print(f"  D={d:<4} {mix:16s} causal={int(causal)}: sm90 {fmt(a)}  sm90-det {fmt(det)}  sm80 {fmt(b)}"
                  f"  dense sm90 {fmt(c)}   {ratio(a, c)}  {ratio(a, b)}  {ratio(det, b)}")
