"""Measured DRAM traffic of eager and tiled attention (ncu: dram__bytes_read.sum +
dram__bytes_write.sum over the attention kernels of one call) beside `tileattn io`'s model.

usage: traffic.py TILEATTN_BINARY OUT.json [--seqlens 1024,2048,4096,8192]
Shape: the seed's B=1, H=32, D=128, bf16, not causal.
"""
import argparse
import csv
import datetime
import io
import json
import re
import subprocess
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SHAPE = ["--batch", "1", "--heads", "32", "--head-dim", "128", "--dtype", "bf16"]
NOT_ATTENTION = re.compile(r"fill|rand|poison|init|copy|memset", re.I)  # set-up kernels and the L2 flush


def measure(binary, L, impl):
    cmd = ["ncu", "--clock-control", "none", "--csv", "--page", "raw",
           "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum",
           binary, "bench", "--device", "cuda", "--seqlens", str(L), "--head-dims", "128",
           "--batch", "1", "--heads", "32", "--dtype", "bf16", "--causal", "off", "--impl", impl,
           "--reps", "1", "--warmup", "0"]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    total, kernels = 0.0, []
    for r in rows[1:] if rows and not rows[0].get("ID", "0").isdigit() else rows:  # skip a units row
        name = r.get("Kernel Name", "")
        try:
            b = float(r["dram__bytes_read.sum"].replace(",", "")) + float(r["dram__bytes_write.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        kernels.append(dict(name=name[:80], bytes=b))
        if not NOT_ATTENTION.search(name):
            total += b
    return total, kernels


def model(binary, seqlens):
    """Parses `tileattn io --kernel gpu`: L -> (eager total, tiled total) in bytes."""
    out = subprocess.run([binary, "io", "--kernel", "gpu", "--seqlens", ",".join(map(str, seqlens))] + SHAPE,
                         capture_output=True, text=True, check=True).stdout
    result = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+\d+ x \d+\s+(.*)", line)
        if not m:
            continue
        sizes = re.findall(r"([\d.]+) (B|KiB|MiB|GiB|TiB)", m.group(2))
        vals = [float(x) * UNITS[u] for x, u in sizes]
        # columns: eager read, eager written, eager total, tiled read, tiled written, tiled total, ...
        result[int(m.group(1))] = (vals[2], vals[5])
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("binary")
    ap.add_argument("out")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192")
    a = ap.parse_args()
    seqlens = [int(x) for x in a.seqlens.split(",")]
    est = model(a.binary, seqlens)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().splitlines()[0]
    rows = []
    for L in seqlens:
        for impl in ("eager", "tiled"):
            measured, kernels = measure(a.binary, L, impl)
            model_bytes = est[L][0 if impl == "eager" else 1]
            rows.append(dict(L=L, impl=impl, measured_bytes=measured, model_bytes=model_bytes, kernels=kernels))
            print(f"L={L:5d} {impl:5s} measured {measured / 2**20:10.1f} MiB   model {model_bytes / 2**20:10.1f} MiB",
                  file=sys.stderr, flush=True)
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), gpu=gpu,
                shape="B=1 H=32 D=128 bf16 non-causal", metric="dram__bytes_read.sum + dram__bytes_write.sum")
    json.dump(dict(meta=meta, rows=rows), open(a.out, "w"), indent=1)
    print("\nDRAM traffic, B=1 H=32 D=128 bf16 (MiB): measured (ncu) vs model (tileattn io --kernel gpu)")
    print(f"{'L':>6} {'eager meas':>11} {'eager model':>12} {'tiled meas':>11} {'tiled model':>12} {'eager/tiled meas':>17}")
    for L in seqlens:
        e = next(r for r in rows if r["L"] == L and r["impl"] == "eager")
        t = next(r for r in rows if r["L"] == L and r["impl"] == "tiled")
        ratio = e["measured_bytes"] / t["measured_bytes"] if t["measured_bytes"] else float("nan")
        print(f"{L:6d} {e['measured_bytes'] / 2**20:11.1f} {e['model_bytes'] / 2**20:12.1f} "
              f"{t['measured_bytes'] / 2**20:11.1f} {t['model_bytes'] / 2**20:12.1f} {ratio:17.1f}")


if __name__ == "__main__":
    main()
