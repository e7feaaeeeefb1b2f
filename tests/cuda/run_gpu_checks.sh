#!/usr/bin/env bash
# run_gpu_checks.sh OUTDIR: the GPU checks of the sm80 kernel on a machine with a CUDA GPU.
#   1. configure + build (Release, GPU arch from TILEATTN_CUDA_ARCHITECTURES, default 90a-real)
#   2. ctest -L cuda (oracle sweep, large tensors, small problems)
#   3. compute-sanitizer memcheck, racecheck, synccheck on tests/cuda/sanitize_small
#   4. timing: bf16, B=4, L=4096, H=16, D in {128, 64}, causal off/on, next to PyTorch SDPA FLASH
#      (TUNE=ON also builds and runs tune_sm80: alternative tile configs side by side)
# Logs go to OUTDIR; a summary is printed last. Exit status: 0 when build, tests and sanitizers pass.
set -u
OUT=${1:?usage: run_gpu_checks.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
ARCH=${TILEATTN_CUDA_ARCHITECTURES:-90a-real}
JOBS=$(nproc)
status=0
summary=()

step() {  # step NAME TIMEOUT_S LOG command...
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")")
  return $rc
}

# CMake < 3.26 does not know nvcc's C++20 flag; tell it (harmless on newer CMake).
step configure 120 "$OUT/configure.log" cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTILEATTN_CUDA=ON -DTILEATTN_CUDA_ARCHITECTURES="$ARCH" -DTILEATTN_BUILD_TOOLS=OFF \
  -DTILEATTN_BUILD_TESTS=ON -DTILEATTN_SM80_TUNE="${TUNE:-OFF}" \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 ||
  status=1
targets=(tileattn_cuda_tests sanitize_small time_fwd)
[ "${TUNE:-OFF}" = ON ] && targets+=(tune_sm80)
step build 600 "$OUT/build.log" cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" || status=1
grep -E "spill|error" "$OUT/build.log" >"$OUT/build_warnings.log" || true

if [ $status -eq 0 ]; then
  step ctest 420 "$OUT/ctest.log" ctest --test-dir "$BUILD" -L cuda --output-on-failure -j "${GPU_TEST_JOBS:-8}" || status=1
  for tool in memcheck racecheck synccheck; do
    step "sanitize-$tool" 240 "$OUT/sanitize_$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$BUILD/tests/cuda/sanitize_small" || status=1
  done
  : >"$OUT/timing.log"
  for d in 128 64; do
    for causal in 0 1; do
      timeout 60 "$BUILD/tests/cuda/time_fwd" 4 4096 16 "$d" "$causal" bf16 20 >>"$OUT/timing.log" 2>&1
    done
  done
  [ "${TUNE:-OFF}" = ON ] && timeout 120 "$BUILD/tests/cuda/tune_sm80" >"$OUT/tune.log" 2>&1
  timeout 120 python3 - >>"$OUT/timing.log" 2>&1 <<'EOF'
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
B, L, H = 4, 4096, 16
for D in (128, 64):
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            stop.record()
            torch.cuda.synchronize()
        ms = start.elapsed_time(stop) / 20
        flops = 4 * B * H * L * L * D * (0.5 if causal else 1.0)
        print(f"sdpa flash bf16 B={B} L={L} H={H} D={D} causal={int(causal)}: {ms:.3f} ms, {flops / ms / 1e9:.1f} TFLOP/s")
EOF
fi

echo "==== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
printf '%s\n' "${summary[@]}"
[ -s "$OUT/build_warnings.log" ] && { echo "-- build warnings:"; head -20 "$OUT/build_warnings.log"; }
[ -f "$OUT/ctest.log" ] && grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$OUT/ctest.log"
for tool in memcheck racecheck synccheck; do
  [ -f "$OUT/sanitize_$tool.log" ] && echo "$tool: $(grep -E 'ERROR SUMMARY|passed, ' "$OUT/sanitize_$tool.log" | tr '\n' ' ')"
done
[ -f "$OUT/timing.log" ] && cat "$OUT/timing.log"
[ -f "$OUT/tune.log" ] && cat "$OUT/tune.log"
exit $status
