#!/usr/bin/env bash
# check_wgmma.sh BUILD_DIR: the sm90 kernels' wgmmas are not serialized. Recompiles the sm90
# forward and backward objects of a Ninja build with ptxas's report (-Xptxas -v, to a
# scratch file) and fails on any C75xx "wgmma serialized" or "warpgroup.wait injected" line:
# ptxas prints them as info, not warnings, and a kernel with one runs its GEMMs one at a time
# (docs/kernels/sm90_backward.md, "Registers"). Known and accepted: the D = 64 cp.async-gather forward
# (kGather, opt-in; three consumers at 152 registers), listed by name below.
set -euo pipefail
build=${1:?usage: check_wgmma.sh BUILD_DIR}
known='attention_fwd_sm90INS1_13DefaultConfigILi64EEE.*Lb1ELb1EE'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
checked=0
for obj in src/CMakeFiles/tileattn.dir/cuda/sm90/forward.cu.o src/CMakeFiles/tileattn.dir/cuda/sm90/bwd.cu.o; do
  cmd=$(ninja -C "$build" -t commands "$obj" 2>/dev/null | tail -1) || continue
  [[ $cmd == *nvcc* ]] || continue
  cmd=${cmd//" -o $obj"/" -o $tmp/out.o"}  # (-o ends nvcc's command line)
  (cd "$build" && eval "$cmd -Xptxas=-v") >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  checked=$((checked + 1))
  if grep -E "\(C75[0-9]+\)" "$tmp/log" | grep -vE "$known" >"$tmp/bad"; then
    echo "check_wgmma: $obj: ptxas serializes wgmmas:"
    cut -c1-300 "$tmp/bad"
    status=1
  fi
done
echo "check_wgmma: $checked sm90 object(s) checked$([[ $status == 0 ]] && echo ", no serialized wgmma")"
exit $status
