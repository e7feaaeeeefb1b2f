#!/usr/bin/env python3
"""stall_table.py CSV: ncu's source page (`--page source --print-source sass --csv`, with the
SourceCounters section) of one kernel, summed: the share of warp-stall samples at each kind of
SASS instruction (its opcode, predicate and modifiers dropped past the first two parts), then
the instructions with the most samples. Lines before the CSV header (the profiled program's own
output) are skipped. Exits 1 when no sample column is found.
"""
import csv
import re
import sys

SAMPLES = ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All)", "Sampling Data (All)")


def read_rows(lines):
    """The CSV part: the header (the first line naming Source and a sampling column) and rows."""
    for i, line in enumerate(lines):
        if '"Source"' in line and "Sampling" in line:
            # Rows with a source cell (ncu's own ==PROF== lines may follow the table).
            return [r for r in csv.DictReader(lines[i:]) if r.get("Source")]
    return []


def opcode(source):
    text = re.sub(r"^\s*@!?U?P\w+\s+", "", source.strip())  # the predicate guard
    op = text.split(" ")[0] if text else "?"
    return ".".join(op.split(".")[:2])


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: stall_table.py CSV")
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        rows = read_rows(f.read().splitlines())
    column = next((c for c in SAMPLES if rows and c in rows[0]), None)
    if column is None:
        print("stall_table: no warp-stall sample column in", sys.argv[1])
        sys.exit(1)
    total = sum(number(r[column]) for r in rows) or 1.0
    by_op = {}
    for r in rows:
        by_op[opcode(r.get("Source", ""))] = by_op.get(opcode(r.get("Source", "")), 0.0) + number(r[column])
    print(f"{int(total)} samples; by instruction kind: " + ", ".join(
        f"{op} {100 * n / total:.1f}%" for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])[:12]))
    address = next((c for c in ("# Address", "Address") if c in rows[0]), None)
    for r in sorted(rows, key=lambda r: -number(r[column]))[:20]:
        at = r.get(address, "") if address else ""
        print(f"{100 * number(r[column]) / total:5.1f}%  {at:>8}  {r.get('Source', '').strip()[:90]}")


if __name__ == "__main__":
    main()
