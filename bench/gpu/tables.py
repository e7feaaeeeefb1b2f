"""Markdown tables for the README and the kernel docs from bench.py's JSON.

usage: tables.py RESULTS.json
Prints, per suite present: forward (tileattn TFLOP/s per L with its ratio to SDPA cuDNN, plain
calls and graph replays), decode (TB/s beside the peers), overhead (us per call).
"""
import json
import sys


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def forward(rows):
    rows = [r for r in rows if r["suite"] == "forward"]
    if not rows:
        return
    get = {(r["D"], r["L"], r["causal"], r.get("seed_shape", False), r["impl"]): r for r in rows}
    seqlens = sorted({r["L"] for r in rows if not r.get("seed_shape")})
    print("tileattn TFLOP/s, and its ratio to SDPA cuDNN (plain calls / graph replays):\n")
    print("| D | causal | " + " | ".join(f"L={L}" for L in seqlens) + " |")
    print("|---|---|" + "---|" * len(seqlens))
    for d in sorted({r["D"] for r in rows}):
        for causal in (False, True):
            cells = []
            for L in seqlens:
                ours, cudnn = get.get((d, L, causal, False, "tileattn")), get.get((d, L, causal, False, "sdpa_cudnn"))
                if not ours or "tflops" not in ours:
                    cells.append("-")
                    continue
                cudnn = cudnn or {}
                cells.append(f"{ours['tflops']:.0f} ({ratio(ours['tflops'], cudnn.get('tflops'))} / "
                             f"{ratio(ours.get('graph_tflops'), cudnn.get('graph_tflops'))})")
            print(f"| {d} | {'yes' if causal else 'no'} | " + " | ".join(cells) + " |")
    seed = [r for r in rows if r.get("seed_shape")]
    if seed:
        by = {r["impl"]: r for r in seed}
        s = seed[0]
        print(f"\nSeed shape B={s['B']} H={s['H']} L={s['L']} D={s['D']}: " + ", ".join(
            f"{name} {by[name]['tflops']:.0f}" for name in by if "tflops" in by[name]) + " TFLOP/s")
    below, cells = [], 0
    for (d, L, causal, seed_shape, impl), r in get.items():
        c = get.get((d, L, causal, seed_shape, "sdpa_cudnn"))
        if impl != "tileattn" or not c:
            continue
        for col in ("", "graph_"):
            if r.get(col + "tflops") and c.get(col + "tflops"):
                cells += 1
                if r[col + "tflops"] < c[col + "tflops"]:
                    below.append(f"D={d} L={L}{' causal' if causal else ''}{' (seed)' if seed_shape else ''} "
                                 f"{col[:-1] or 'plain'}")
    print(f"\ntileattn below cuDNN in {len(below)} of {cells} cells (plain and graph columns): " + "; ".join(below))


def decode(rows, meta):
    rows = [r for r in rows if r["suite"] == "decode"]
    if not rows:
        return
    get = {(r["B"], r["Lk"], r["impl"]): r for r in rows}
    impls = [i for i in ("tileattn", "tileattn_nosplit", "sdpa_cudnn", "sdpa_flash", "tileattn_sm80", "read_kv")
             if any(k[2] == i for k in get)]
    print(f"\nDecode, 1 query, 32 query heads on 8 KV heads, D=128: K/V read TB/s "
          f"(copy ceiling {meta.get('copy_tbps', 0):.2f}):\n")
    print("| B | Lk | " + " | ".join(impls) + " | ours / cuDNN |")
    print("|---|---|" + "---|" * (len(impls) + 1))
    for b, lk in sorted({(k[0], k[1]) for k in get}):
        vals = [get.get((b, lk, i), {}).get("tbps") for i in impls]
        print(f"| {b} | {lk} | " + " | ".join(f"{v:.2f}" if v else "-" for v in vals) + " | "
              + ratio(vals[0], get.get((b, lk, "sdpa_cudnn"), {}).get("tbps")) + " |")


def varlen(rows):
    rows = [r for r in rows if r["suite"] == "varlen"]
    if not rows:
        return
    print("\nVarlen prefill, 16k tokens packed, bf16, D=128, 32/8 heads: TFLOP/s (plain / graph) beside the "
          "dense kernel on the same sequences:\n")
    print("| lengths | causal | varlen | graph | dense | varlen / dense |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["impl"] != "tileattn":
            continue
        d = next(x for x in rows if x["impl"] == "tileattn_dense" and x["mix"] == r["mix"] and x["causal"] == r["causal"])
        print(f"| {r['mix']} | {'yes' if r['causal'] else 'no'} | {r['tflops']:.0f} | {r['graph_tflops']:.0f} | "
              f"{d['tflops']:.0f} | {r['tflops'] / d['tflops']:.3f} |")


def overhead(rows):
    rows = [r for r in rows if r["suite"] == "overhead"]
    if not rows:
        return
    print("\nHost overhead at B=1 L=128 H=8 D=64 (microseconds per call):\n")
    print("| implementation | host CPU | GPU idle between calls |")
    print("|---|---|---|")
    for r in rows:
        if "error" not in r:
            print(f"| {r['impl']} | {r['host_cpu_us']:.1f} | {r['gpu_idle_us']:.1f} |")


def main():
    doc = json.load(open(sys.argv[1]))
    print(f"From {sys.argv[1]} (commit {doc['meta'].get('commit')}, {doc['meta']['gpu']}, {doc['meta']['date'][:10]})\n")
    forward(doc["rows"])
    decode(doc["rows"], doc["meta"])
    varlen(doc["rows"])
    overhead(doc["rows"])


if __name__ == "__main__":
    main()
