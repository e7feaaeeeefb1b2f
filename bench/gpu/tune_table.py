#!/usr/bin/env python3
"""tune_table.py LOG: tests/cuda_sm90/tune_sm90's lines as one table a head dim, each variant's
TFLOP/s over the library's default config (tile_config in src/cuda/sm90/tile_config.h) timed
in the same run, per shape (causal, B x Lq x Lk). A variant is named by the fields it changes
from the default (and by its page size and split count where they are set).

Reads the lines `D= 64 N=128 stages=2 consumers=3 pingpong=1 persistent=1 ... causal=0 ...
Lq= 2048 ...: 0.634 ms 433.4 TFLOP/s ... max|diff vs default| 0` (other lines are skipped) and
prints markdown, the largest difference from the default's output over the shapes last (a
variant that changes the bits shows here). Exits 1 when no line parses.
"""
import re
import sys

# The library's configs (tile_config): the fields a tune line prints.
# ("overlap": a removed variant's field, kept so that older result files still parse. Files from
# before the second Q buffer became the default at D = 64 and 128 name their default
# "defer=0, q_bufs=1"; from before the lean epilogue became the default (after 88fc598),
# "lean=0" (later files have no "lean" field: every dense kernel has it); from before tiles under a mask ended at the rows' end, "end" is missing (not named).
# "handoff" and "early_q": removed variants' fields.)
DEFAULTS = {
    64: {"N": 128, "stages": 2, "consumers": 3, "pingpong": 1, "persistent": 1, "packing": 1, "v_warps": 0,
         "skip": 1, "chains": 1, "o_direct": 0, "defer": 1, "q_bufs": 2, "overlap": 0, "handoff": 0, "lpt": 0, "l2": 0, "early_q": 0, "lean": 1, "end": 1},
    128: {"N": 128, "stages": 2, "consumers": 2, "pingpong": 1, "persistent": 1, "packing": 1, "v_warps": 0,
          "skip": 0, "chains": 1, "o_direct": 0, "defer": 1, "q_bufs": 2, "overlap": 0, "handoff": 0, "lpt": 0, "l2": 0, "early_q": 0, "lean": 1, "end": 1},
    256: {"N": 80, "stages": 2, "consumers": 2, "pingpong": 1, "persistent": 0, "packing": 1, "v_warps": 0,
          "skip": 0, "chains": 1, "o_direct": 0, "defer": 0, "q_bufs": 1, "overlap": 0, "handoff": 0, "lpt": 0, "l2": 0, "early_q": 0, "lean": 1, "end": 1},
}
LINE = re.compile(r"D=\s*(\d+) (.*?): ([\d.]+) ms\s+([\d.]+) TFLOP/s.*?max\|diff vs default\| (\S+)")
FIELD = re.compile(r"(\w+)=\s*(-?\d+)")


def parse(lines):
    """(D, variant name, (causal, B, Lq, Lk)) -> (TFLOP/s, max diff), the first of repeats."""
    out = {}
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        d = int(m.group(1))
        fields = {k: int(v) for k, v in FIELD.findall(m.group(2))}
        if d not in DEFAULTS or not all(k in fields for k in ("causal", "B", "Lq", "Lk")):
            continue
        changed = [f"{k}={fields[k]}" for k, v in DEFAULTS[d].items() if k in fields and fields[k] != v]
        changed += [f"{k}={fields[k]}" for k in ("page", "splits") if fields.get(k, 0) > 1]
        name = ", ".join(changed) or "default"
        key = (d, name, (fields["causal"], fields["B"], fields["Lq"], fields["Lk"]))
        out.setdefault(key, (float(m.group(4)), m.group(5)))
    return out


def label(shape):
    causal, b, lq, lk = shape
    size = f"L {lq}" if lq == lk else f"{b} x {lq} x {lk}"
    return f"{'causal' if causal else 'full'} {size}"


def tables(results):
    rows = []
    for d in sorted({k[0] for k in results}):
        shapes = sorted({k[2] for k in results if k[0] == d}, key=lambda s: (s[2] != s[3], s[0], s[2], s[3], s[1]))
        names = sorted({k[1] for k in results if k[0] == d}, key=lambda n: (n != "default", n))
        rows.append(f"\nD = {d}: TFLOP/s, and in brackets the ratio to the default timed in the same run\n")
        rows.append("| variant | " + " | ".join(label(s) for s in shapes) + " | max abs diff from the default |")
        rows.append("|---" * (len(shapes) + 2) + "|")
        for name in names:
            cells = []
            for shape in shapes:
                got, base = results.get((d, name, shape)), results.get((d, "default", shape))
                if got is None:
                    cells.append("")
                elif base is None or name == "default":
                    cells.append(f"{got[0]:.0f}")
                else:
                    cells.append(f"{got[0]:.0f} ({got[0] / base[0]:.3f})")
            diffs = [float(v[1]) for k, v in results.items() if k[0] == d and k[1] == name]
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {max(diffs):.3g} |")
    return "\n".join(rows)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tune_table.py LOG")
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        results = parse(f)
    if not results:
        print("tune_table: no tune_sm90 lines in", sys.argv[1])
        sys.exit(1)
    print(tables(results))


if __name__ == "__main__":
    main()
