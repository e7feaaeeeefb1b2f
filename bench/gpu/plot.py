"""Plots from bench.py's and traffic.py's JSON: TFLOP/s against L per (D, mask), and memory
traffic against L (measured DRAM bytes beside the io model's estimate)."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"tileattn": "tileattn", "tileattn_sm80": "tileattn sm80 kernel", "tileattn_eager": "tileattn eager (cuBLAS, S and P in HBM)",
          "torch_eager": "PyTorch eager", "sdpa_flash": "SDPA FLASH (FA2)",
          "sdpa_efficient": "SDPA EFFICIENT", "sdpa_cudnn": "SDPA cuDNN"}


def plot_speed(bench, path):
    rows = [r for r in bench["rows"]
            if r.get("suite", "forward") == "forward" and "tflops" in r and not r.get("seed_shape")]
    dims = sorted({r["D"] for r in rows})
    if not dims:  # a run without the forward suite: nothing to plot
        print("plot: no forward rows in the bench JSON; no gpu_tflops.png")
        return
    fig, axes = plt.subplots(len(dims), 2, figsize=(11, 4 * len(dims)), squeeze=False)
    for i, d in enumerate(dims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            for impl, label in LABELS.items():
                pts = sorted((r["L"], r["tflops"]) for r in rows if r["D"] == d and r["causal"] == causal and r["impl"] == impl)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'} (bf16, hidden 2048, B*L=16384)")
            ax.set_xlabel("sequence length L")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Attention forward on {bench['meta']['gpu']} ({bench['meta']['date'][:10]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_traffic(traffic, path):
    rows = traffic["rows"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl, style in (("eager", "tab:red"), ("tiled", "tab:blue")):
        pts = sorted((r["L"], r["measured_bytes"] / 2**30, r["model_bytes"] / 2**30) for r in rows if r["impl"] == impl)
        if pts:
            L, meas, model = zip(*pts)
            ax.plot(L, meas, marker="o", color=style, label=f"{impl}: DRAM bytes measured (ncu)")
            ax.plot(L, model, linestyle="--", color=style, label=f"{impl}: io model estimate")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("GiB read + written")
    ax.set_title(f"Memory traffic, B=1 H=32 D=128 bf16 ({traffic['meta']['gpu']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench")
    ap.add_argument("--traffic")
    ap.add_argument("--outdir", default=".")
    a = ap.parse_args()
    if a.bench:
        plot_speed(json.load(open(a.bench)), f"{a.outdir}/gpu_tflops.png")
    if a.traffic:
        plot_traffic(json.load(open(a.traffic)), f"{a.outdir}/gpu_traffic.png")
