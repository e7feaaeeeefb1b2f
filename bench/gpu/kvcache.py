"""The kvcache suite of bench/gpu/bench.py: a decoding step over a KV cache, contiguous or paged.

Every call goes through `tileattn.flash_attn_with_kvcache` (flash-attn 3's signature) on the
decode suite's shapes (one query, bf16, 32 query heads on 8 KV heads of 128), by the one timer
(both columns):
  contiguous  the cache [B, Lk, 8, 128] with cache_seqlens = Lk (a device tensor)
  paged P     the same keys in pages of P rows (P = 16, 64, 256), the page table a random
              permutation of the pages; P = 4 as well, which auto selection runs on the sm80
              kernel, and "paged 4 sm90": the same forced onto sm90's cp.async gathers (JSON rows)
  append      the step with its new token: k and v [B, 1, 8, 128] written at Lk - 1 with
              rotary (NeoX halves, rotary_dim 128) on them and on q, contiguous cache; the
              append's cost is its time minus the contiguous step's
TB/s counts the K and V bytes of the cache read once.
"""
import sys

import torch

import tileattn
from progress import Rows

PAGE_SIZES = (16, 64, 256)
GATHER_PAGE = 4  # not a multiple of 8: sm80 by default, sm90 gathers when forced


def kvcache_suite(args, timer, shapes, release):
    rows = Rows()
    Hq, Hkv, D = 32, 8, 128
    for B, Lk in shapes:
        kv_gb = 2.0 * B * Lk * Hkv * D * 2 / 1e9
        g = torch.Generator(device="cuda").manual_seed(0)
        randn = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
        q = randn(B, 1, Hq, D)
        k_cache, v_cache = randn(B, Lk, Hkv, D), randn(B, Lk, Hkv, D)
        seqlens = torch.full((B,), Lk, dtype=torch.int32, device="cuda")
        calls = {"contiguous": lambda: tileattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens)}
        pages = {}
        for P in PAGE_SIZES + (GATHER_PAGE,):
            if Lk % P:
                continue
            n = B * Lk // P
            perm = torch.randperm(n, device="cuda", generator=g).to(torch.int32)
            table = perm.reshape(B, Lk // P)
            kp = torch.empty(n, P, Hkv, D, device="cuda", dtype=torch.bfloat16)
            vp = torch.empty_like(kp)
            kp[perm.long()] = k_cache.reshape(n, P, Hkv, D)  # page table[b, j] holds rows j*P.. of b
            vp[perm.long()] = v_cache.reshape(n, P, Hkv, D)
            pages[P] = (kp, vp, table)
            calls[f"paged {P}"] = (lambda kp=kp, vp=vp, table=table: tileattn.flash_attn_with_kvcache(
                q, kp, vp, cache_seqlens=seqlens, page_table=table))
            if P == GATHER_PAGE:
                calls[f"paged {P} sm90"] = (lambda kp=kp, vp=vp, table=table: tileattn.flash_attn_with_kvcache(
                    q, kp, vp, cache_seqlens=seqlens, page_table=table, kernel="sm90"))
        k_new, v_new = randn(B, 1, Hkv, D), randn(B, 1, Hkv, D)
        theta = torch.arange(Lk, device="cuda")[:, None] * 10000.0 ** (-torch.arange(D // 2, device="cuda") / (D // 2))
        cos, sin = theta.cos().to(torch.bfloat16), theta.sin().to(torch.bfloat16)
        before = seqlens - 1
        calls["append"] = lambda: tileattn.flash_attn_with_kvcache(
            q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=before,
            rotary_interleaved=False)
        reference = calls["contiguous"]()
        for name, call in calls.items():
            row = dict(suite="kvcache", B=B, Lk=Lk, Hq=Hq, Hkv=Hkv, D=D, impl=name)
            try:
                out = call()
                if name.startswith("paged"):
                    row["max_diff_vs_contiguous"] = (out.float() - reference.float()).abs().max().item()
                r = timer.time(call)
                row.update(ms=r["ms"], tbps=kv_gb / r["ms"], sm_mhz=r["sm_mhz"])
                try:
                    gr = timer.time_graph(call)
                    row.update(graph_ms=gr["ms"], graph_tbps=kv_gb / gr["ms"])
                except Exception as e:  # not capturable: recorded, the plain column stands
                    row["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    torch.cuda.synchronize()
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
        del q, k_cache, v_cache, pages, calls, reference
        release()
    return rows


def print_table(rows):
    sel = [r for r in rows if r["suite"] == "kvcache"]
    if not sel:
        return
    names = ["contiguous"] + [f"paged {P}" for P in PAGE_SIZES] + ["append"]
    by = {}
    for r in sel:
        by.setdefault((r["B"], r["Lk"]), {})[r["impl"]] = r
    print("\nkvcache: TB/s of the cache's K/V (bf16, Hq 32 / Hkv 8, D 128), plain / graph; paged as a "
          "fraction of contiguous; append = step with the new token and rotary, its extra us")
    print("     B     Lk " + " ".join(f"{n:>17}" for n in names) + "  paged/contig (16, 64, 256)  append us")
    for (B, Lk), vals in by.items():
        cell = lambda n: (f"{vals[n]['tbps']:7.2f}/{vals[n].get('graph_tbps', float('nan')):7.2f}  "
                          if n in vals and "tbps" in vals[n] else f"{'-':>17}")
        base = vals.get("contiguous", {}).get("ms")
        frac = " ".join(f"{base / vals[n]['ms']:6.3f}" if base and "ms" in vals.get(n, {}) else f"{'-':>6}"
                        for n in names[1:4])
        extra = (vals["append"]["ms"] - base) * 1e3 if base and "ms" in vals.get("append", {}) else float("nan")
        print(f"{B:>6} {Lk:>6} " + " ".join(cell(n) for n in names) + f"  {frac:>26}  {extra:8.1f}")
