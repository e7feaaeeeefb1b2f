#!/usr/bin/env bash
# setmaxnreg_probe.sh: ptxas's spills for tests/cuda_sm90/probes/setmaxnreg_probe.cu (compile
# only, no GPU): NN live accumulators in a consumer warpgroup of a 384-thread kernel, with the
# setmaxnreg pair (24 / 240) and without it.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)/tests/cuda_sm90/probes/setmaxnreg_probe.cu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spills() {
  nvcc -gencode arch=compute_90a,code=sm_90a -O3 -c "$src" -o "$tmp/p.o" -Xptxas=-v "$@" 2>&1 |
    grep -oE "[0-9]+ bytes spill stores" | head -1
}
for nn in ${NN_LIST:-160 190 230 238}; do
  printf 'NN %3s: with setmaxnreg %-24s without %s\n' "$nn" "$(spills -DNN="$nn" -DWITH_SETMAXNREG)" \
    "$(spills -DNN="$nn")"
done
