#!/usr/bin/env python3
"""tile_order_model.py: how well persistent CTAs balance the sm90 forward's causal tiles under
two tile orders, by list scheduling (each of 132 CTAs takes the next tile when it finishes its
last). No GPU: a model, to decide what to time (TileConfig::lpt_mib, tune_sm90).

A tile costs C0 + its key blocks, in units of one mainloop step; C0 = 2 stands for a tile's
fixed part (Q wait, epilogue, hand-off: ~40% of a 3-block tile in the forward probe at D = 64,
L = 512). Orders:
  head-major   the library's: one (batch, head) pair at a time, its last m-block first;
  lpt          longest first across all pairs (TileConfig::lpt_mib = -1);
  lpt/24MiB    longest first within sections of pairs whose K and V fit 24 MiB (lpt_mib = 24).
Prints the ideal time over each order's makespan (1.0: no CTA idles at the end). Memory is
not modelled: lpt's concurrent tiles come from many pairs, whose K and V may not stay in L2.
"""
import heapq
import math

CTAS, C0 = 132, 2.0


def makespan(costs):
    free = [0.0] * CTAS
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def orders(L, D, causal):
    block_m, block_n = (192, 128) if D == 64 else (128, 128)  # tile_config: D = 64 three consumers
    pairs, m_blocks = (16384 // L) * (2048 // D), math.ceil(L / block_m)

    def cost(m):
        keys = min(L, (m + 1) * block_m) if causal else L
        return C0 + math.ceil(keys / block_n)

    section = max(1, min(pairs, (24 << 20) // (2 * L * D * 2)))
    out = {"head-major": [cost(m_blocks - 1 - t) for _ in range(pairs) for t in range(m_blocks)],
           "lpt": [cost(m) for m in reversed(range(m_blocks)) for _ in range(pairs)], "lpt/24MiB": []}
    for first in range(0, pairs, section):
        n = min(section, pairs - first)
        out["lpt/24MiB"] += [cost(m) for m in reversed(range(m_blocks)) for _ in range(n)]
    return out


def main():
    print("D     L  mask    " + "  ".join(f"{k:>10}" for k in ("head-major", "lpt", "lpt/24MiB")))
    for D in (64, 128):
        for L in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (True, False):
                o = orders(L, D, causal)
                ideal = sum(o["head-major"]) / CTAS
                print(f"{D:<4}{L:>6}  {'causal' if causal else 'full  '}  " +
                      "  ".join(f"{ideal / makespan(c):10.3f}" for c in o.values()))


if __name__ == "__main__":
    main()
