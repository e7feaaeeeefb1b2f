"""One decode shape through several entries that run the same kernel, plain calls and graph
replays under the harness's timer: how far identical calls spread from power and clock alone
(bench/results/probe_kv64_h200_2026-12-05_5d9e54a.txt).
    python bench/gpu/probe_kv64.py
"""
import sys
import torch
import tileattn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import timer as timers

t = timers.Timer(100, 10)
s_ctx = torch.cuda.Stream()
for B, Lk in ((64, 4096), (64, 32768), (8, 16384)):
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Lk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    seq = torch.full((B,), Lk, dtype=torch.int32, device="cuda")
    gb = 2.0 * k.numel() * 2 / 1e9
    calls = {
        "attention": lambda: tileattn.attention(q, k, v),
        "flash_attn_func": lambda: tileattn.flash_attn_func(q, k, v),
        "kvcache seqlens": lambda: tileattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seq),
        "kvcache int": lambda: tileattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=Lk),
        "kvcache seqlens again": lambda: tileattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seq),
    }
    for name, c in calls.items():
        with torch.cuda.stream(s_ctx):
            p, g = t.time(c), t.time_graph(c)
            print(f"{B}x{Lk} {name:24s} plain {gb / p['ms']:.2f} TB/s ({p['ms'] * 1e3:.1f} us, min {p.get('ms_min', 0) * 1e3:.1f})"
                  f"  graph {gb / g['ms']:.2f}", flush=True)
