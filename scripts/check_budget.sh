#!/usr/bin/env bash
# The budget checks CI runs first: every C++/CUDA source clang-format clean (the repo's
# .clang-format), no source file over the line cap, and the generated wgmma file the output of
# its generator. Exits non-zero naming what fails.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly LINE_CAP=500
readonly GENERATED=src/cuda/sm90/wgmma_ops.cuh
status=0

mapfile -t sources < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | grep -v "^$GENERATED$")
unformatted=()
for f in "${sources[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if ((${#unformatted[@]})); then
  echo "budget: not clang-format clean (run clang-format -i on them): ${unformatted[*]}"
  status=1
fi

while read -r lines file; do
  [[ $file == total || $file == "$GENERATED" ]] && continue
  if ((lines > LINE_CAP)); then
    echo "budget: $file has $lines lines, over the cap of $LINE_CAP: split it"
    status=1
  fi
done < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.py' | xargs wc -l)

if ! (cd src/cuda/sm90 && python3 gen_wgmma_ops.py | cmp -s - wgmma_ops.cuh); then
  echo "budget: $GENERATED differs from what gen_wgmma_ops.py writes (regenerate it, do not edit it)"
  status=1
fi
((status == 0)) && echo "budget: clang-format clean, every file <= $LINE_CAP lines, $GENERATED up to date"
exit $status
