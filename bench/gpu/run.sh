#!/usr/bin/env bash
# run.sh OUTDIR [STAGE...]: the GPU harness, on a machine with an NVIDIA GPU.
#   build     configure and build (Release, CUDA for TILEATTN_CUDA_ARCHITECTURES, default 90a-real;
#             SM90_FORWARD=OFF builds without the sm90 forward kernel, which is on by default;
#             BUILD_TARGETS="t1 t2": those targets alone, e.g. the tuning binaries)
#   test      GPU tests (ctest -L cuda), then the CPU suite
#   gputest   the GPU tests alone (GPU_TESTS=REGEX: those ctest names only)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on tests/cuda/sanitize_small
#   python    pip install (no build isolation) and pytest tests/python (GPU tests included;
#             PYTEST_ARGS replaces the test selection)
#   tune_split  tests/cuda_sm90/tune_sm90_split (SM90_TUNE=ON): the split decode under other
#             K / V rings and V loaders, and over pages of 16 and 64 in random order and in
#             order, GB/s of K and V
#   cta_probe tests/cuda_sm90/tune_sm90_probe (SM90_TUNE=ON): each CTA's entry, first K, loads'
#             end and finish in the split decode, by SM and by KV head
#   fwd_probe tests/cuda_sm90/tune_sm90_fwd_probe (SM90_TUNE=ON): the dense forward's consumers
#             tile by tile on short rows, cycles by phase (Q wait, block 0, steady steps, last
#             P V, skipped tail, epilogue, to the next tile)
#   stream    tests/cuda_sm90/stream_probe (SM90_TUNE=ON builds it): TMA streaming of a decode's
#             K and V without the attention, under other boxes, head groupings and rings
#   profile_decode  ncu: DRAM bytes read, DRAM throughput and L2 hit rate of each decode kernel of
#             tileattn and of SDPA cuDNN (PROFILE_DECODE: "B,Lk" shapes), all calls' kernels
#   profile   ncu sections of the sm90 kernel on short and long rows (D 64 causal, D 128)
#   profile_src  ncu's warp-stall samples per SASS instruction of the sm90 forward (PROFILE_SRC
#             shapes, as PROFILE_SHAPES): OUTDIR/profile_src_*.csv, summed by instruction in the
#             summary (stall_table.py)
#   profile_src_bwd  the same for the sm90 backward (PROFILE_SRC_BWD: "B,L,H,D causal(on|off)"
#             entries, ';'-separated; the Python package, installed first)
#   profile_bwd  ncu on the sm90 backward (PROFILE_BWD shapes): stall reasons per issue, the
#             tensor pipe's and shared memory's use
#   tune      tests/cuda_sm90/tune_sm90: alternative sm90 configs (SM90_TUNE=ON builds it; TUNE_D=128:
#             that head dim alone) at
#             the lengths in TUNE_L (default 1024 4096 16384); the lines in OUTDIR/tune.txt,
#             each variant over the default in the summary (tune_table.py)
#   tune_bwd  tests/cuda_sm90/tune_sm90_bwd: where the sm90 backward's time goes (preprocessing,
#             zeroing, kernel, conversion, each timed alone) at D = 64, 128, 256, its variants
#             beside it (persistent, direct dK / dV, deterministic mode's grouped launch order) and
#             CTA timelines (SM90_TUNE=ON with the CUDA backward), at TUNE_BWD_L
#   bench     bench.py: tileattn (through the Python package, installed first if the python
#             stage has not run), its sm80 kernel and eager path, PyTorch eager, SDPA
#             FLASH/EFFICIENT/CUDNN, one process, one timer, plain and CUDA-graph columns;
#             suites from BENCH_SUITES (default gap,forward,decode,varlen,overhead,backward,kvcache),
#             implementations from BENCH_IMPLS (e.g. tileattn,tileattn_sm90bwd,sdpa_cudnn for the
#             backward), more bench.py arguments in BENCH_ARGS (e.g. --seqlens 1024,8192);
#             plot.py (PNGs)
#   traffic   traffic.py (ncu DRAM bytes beside the io model)
#   splits    decode_splits.py: decode TB/s against forced split counts, and a per-kernel profile
#   transformers  transformers_bench.py: a Llama on tileattn beside sdpa (prefill, decode ms per
#             token, padded-batch agreement), transformers.json
# Stages run in the order given (default: build test sanitize python bench traffic). With
# DEADLINE=S, a stage that would start after S seconds is skipped (a time-boxed run). Everything goes to OUTDIR: logs.txt (every step's output),
# gpu_bench.json, gpu_traffic.json, gpu_tflops.png, gpu_traffic.png, summary.txt; the summary
# is printed last.
set -u
OUT=${1:?usage: run.sh OUTDIR [build test sanitize python bench]}
shift
stages=${*:-build test sanitize python bench traffic transformers}
DEADLINE=${DEADLINE:-100000}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build/gpu
ARCH=${TILEATTN_CUDA_ARCHITECTURES:-90a-real}
LOG=$OUT/logs.txt
SUMMARY=$OUT/summary.txt
# The commit the results name: TILEATTN_COMMIT, else the checkout's HEAD (a copied tree's .git
# may be older than its files: pass TILEATTN_COMMIT when the tree travels).
[[ -n "${TILEATTN_COMMIT:-}" ]] || echo "run.sh: TILEATTN_COMMIT not set; the results name git's HEAD" >&2
export TILEATTN_COMMIT=${TILEATTN_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
export PYTHONUNBUFFERED=1
touch "$LOG" "$SUMMARY"

step() {  # step NAME TIMEOUT_S command...: runs it, logs it, records a summary line
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "=== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  printf '%-18s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$SUMMARY" >&2
  return $rc
}
has() { [[ " $stages " == *" $1 "* ]]; }
in_time() {  # in_time STAGE: false (and noted) once the deadline has passed
  if ((SECONDS > DEADLINE)); then
    printf '%-18s skipped (deadline %ss)\n' "$1" "$DEADLINE" | tee -a "$SUMMARY" >&2
    return 1
  fi
}

run_build() {  # with the Python extension where this Python can build it (run_install), else without
  local options=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=ON
    -DTILEATTN_CUDA_ARCHITECTURES="$ARCH" -DTILEATTN_BUILD_TESTS=ON -DTILEATTN_BUILD_TOOLS=ON
    -DTILEATTN_SM90_FORWARD="${SM90_FORWARD:-ON}" -DTILEATTN_SM90_TUNE="${SM90_TUNE:-OFF}"
    -DTILEATTN_CUDA_BACKWARD="${CUDA_BACKWARD:-ON}" -DPython_EXECUTABLE="$(command -v python3)")
  step configure 180 cmake "${options[@]}" -DTILEATTN_BUILD_PYTHON=ON ||
    step configure-nopy 180 cmake "${options[@]}" -DTILEATTN_BUILD_PYTHON=OFF
  # BUILD_TARGETS: those targets alone (e.g. "tune_sm90 tune_sm90_fwd_probe" for a tuning call)
  # shellcheck disable=SC2086
  step build 420 cmake --build "$BUILD" -j "$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
  grep -E "warning|spill|\(C75[0-9]+\)" "$LOG" | grep -v "^===" | sort -u | grep -v "sm8018attention_fwd_sm80" | head -30 >>"$SUMMARY"
  if command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null; then  # wgmma descriptors uniform
    step check-sass 120 python3 "$ROOT/scripts/check_sass.py" "$BUILD/src/CMakeFiles/tileattn.dir/cuda/sm90/forward.cu.o"
    awk '/=== check-sass/,0' "$LOG" | grep "check_sass" | head -8 | sed "s@$ROOT/@@g" >>"$SUMMARY"
  fi
}
run_gputest() {
  step ctest-gpu 540 ctest --test-dir "$BUILD" -L cuda ${GPU_TESTS:+-R "$GPU_TESTS"} --output-on-failure -j "${GPU_TEST_JOBS:-8}"
  grep -E "tests passed|tests failed" "$LOG" | tail -1 >>"$SUMMARY"
  grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess)" "$LOG" | head -12 >>"$SUMMARY"
  grep -E "^\[  FAILED  \]" "$LOG" | sort -u | head -24 >>"$SUMMARY"
}
run_test() {
  run_gputest
  step ctest-cpu 240 ctest --test-dir "$BUILD" -LE cuda --output-on-failure -j "$(nproc)"
  grep -E "tests passed|tests failed" "$LOG" | tail -1 >>"$SUMMARY"
}
run_sanitize() {
  for tool in memcheck racecheck synccheck; do
    step "sanitize-$tool" 240 compute-sanitizer --tool "$tool" --error-exitcode 3 "$BUILD/tests/cuda/sanitize_small"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG" | tail -1 >>"$SUMMARY"
  done
}
installed=0
run_install() {  # the Python package, once per run
  ((installed)) && return 0
  installed=1
  # The build stage's extension (the same library, Release) beside the package's Python files:
  # pip would compile every kernel again (85-90 s of a GPU call).
  local module
  module=$(find "$BUILD/python" -maxdepth 1 -name "_C*.so" 2>/dev/null | head -1)
  if [[ -n "$module" && "${PIP_INSTALL:-0}" != 1 ]]; then
    local version
    version=$(sed -n 's/^project(tileattn VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
    rm -rf "$BUILD/pypkg" && mkdir -p "$BUILD/pypkg/tileattn-$version.dist-info" &&
      cp -r "$ROOT/python/tileattn" "$BUILD/pypkg/" && cp "$module" "$BUILD/pypkg/tileattn/" &&
      printf 'Metadata-Version: 2.1\nName: tileattn\nVersion: %s\n' "$version" \
        >"$BUILD/pypkg/tileattn-$version.dist-info/METADATA"  # importlib.metadata's version
    export PYTHONPATH="$BUILD/pypkg${PYTHONPATH:+:$PYTHONPATH}"
    printf '%-18s the build stage'"'"'s module (%s)\n' python-package "$(basename "$module")" | tee -a "$SUMMARY" >&2
    return 0
  fi
  step pip-install 420 python3 -m pip install --no-build-isolation --no-deps -q "$ROOT" \
    -C cmake.define.TILEATTN_CUDA=ON -C cmake.define.TILEATTN_CUDA_ARCHITECTURES="$ARCH" \
    -C cmake.define.TILEATTN_SM90_FORWARD="${SM90_FORWARD:-ON}" \
    -C cmake.define.TILEATTN_CUDA_BACKWARD="${CUDA_BACKWARD:-ON}" \
    -C build-dir="$ROOT/build/python"
}
run_python() {
  run_install
  step pytest 300 python3 -m pytest -q -rs ${PYTEST_ARGS:-"$ROOT/tests/python"}
  grep -E "passed|failed" "$LOG" | tail -1 >>"$SUMMARY"
}
run_tune() {  # alternative sm90 configs (a build with SM90_TUNE=ON): OUTDIR/tune.txt, a table
  step tune 300 "$BUILD/tests/cuda_sm90/tune_sm90" ${TUNE_L:-1024 4096 16384}
  awk '/=== tune:/,0' "$LOG" | grep -E "TFLOP/s|FAILED" >"$OUT/tune.txt"
  grep "FAILED" "$OUT/tune.txt" >>"$SUMMARY"
  python3 "$ROOT/bench/gpu/tune_table.py" "$OUT/tune.txt" >>"$SUMMARY"
}
run_tune_bwd() {  # the sm90 backward's parts timed alone (SM90_TUNE=ON, CUDA_BACKWARD on)
  step tune-bwd 200 "$BUILD/tests/cuda_sm90/tune_sm90_bwd" ${TUNE_BWD_L:-512 1024 4096 16384}
  awk '/=== tune-bwd/,0' "$LOG" | grep -E "^ +[0-9]+ |preprocess|failed|FAILED|what\(\)|CUDA error|CTAs|position" | cut -c1-300 >>"$SUMMARY"
}
run_tune_split() {  # split decode under other K / V rings and V loaders (a build with SM90_TUNE=ON)
  step tune-split 300 "$BUILD/tests/cuda_sm90/tune_sm90_split"
  awk '/=== tune-split/,0' "$LOG" | grep -E "GB/s|^pages of" | sed 's/ Hq=32 Hkv=8//; s/ TFLOP\/s//' | cut -c1-170 >>"$SUMMARY"
}
run_cta_probe() {  # per-CTA timeline of the split decode (a build with SM90_TUNE=ON)
  step cta-probe 150 "$BUILD/tests/cuda_sm90/tune_sm90_probe"
  awk '/=== cta-probe/,0' "$LOG" | grep -E "^B=|by KV head|correlation" | cut -c1-400 >>"$SUMMARY"
}
run_fwd_probe() {  # the dense forward's phases per tile (a build with SM90_TUNE=ON)
  step fwd-probe 120 "$BUILD/tests/cuda_sm90/tune_sm90_fwd_probe"
  awk '/=== fwd-probe/,0' "$LOG" | grep -vE "^===" | cut -c1-600 >>"$SUMMARY"
}
run_stream() {  # TMA streaming of a decode's K and V alone (a build with SM90_TUNE=ON)
  step stream 240 "$BUILD/tests/cuda_sm90/stream_probe"
  awk '/=== stream/,0' "$LOG" | grep -E "GB/s|x " >>"$SUMMARY"
}
run_profile_decode() {  # ncu: DRAM bytes and rate of tileattn's decode kernels beside cuDNN's
  run_install
  local shape impl metrics=gpu__time_duration.sum,dram__bytes_read.sum
  metrics=$metrics,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
  for shape in ${PROFILE_DECODE:-1,131072 8,16384 8,131072}; do
    for impl in tileattn cudnn; do
      # The kernels of the calls (NVTX ranges "<impl>"), not the inputs' fills or the flush.
      step "profile-decode-$impl-${shape//,/x}" 180 ncu --clock-control none --nvtx --nvtx-include "$impl/" \
        --metrics "$metrics" python3 "$ROOT/bench/gpu/profile_decode.py" --impl "$impl" --shape "$shape"
      awk "/=== profile-decode-$impl-${shape//,/x}:/,0" "$LOG" | grep -E "^ +[a-zA-Z_]+.*\(|^ +(gpu__|dram__|lts__)" \
        | cut -c1-200 | sed "s/^ */  decode $impl $shape: /" | head -24 >>"$SUMMARY"
    done
  done
}
each_shape() {  # each_shape "A B;C D" FN: FN A B, then FN C D (';'-separated entries, words as arguments)
  local list entry
  IFS=';' read -ra list <<<"$1"
  for entry in "${list[@]}"; do
    # shellcheck disable=SC2086  # the entry's words are the arguments
    "$2" $entry
  done
}
profile_one() {  # D L B H causal(on|off)
  step "profile-d$1-l$2-$5" 120 ncu --clock-control none -k regex:attention_fwd_sm90 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section ComputeWorkloadAnalysis \
    "$BUILD/tools/tileattn" bench --device cuda --kernel sm90 --seqlens "$2" --head-dims "$1" --batch "$3" \
    --heads "$4" --dtype bf16 --causal "$5" --impl tiled --reps 1 --warmup 2
  awk "/=== profile-d$1-l$2-$5:/,0" "$LOG" | grep -E "^ +(Duration|Compute \(SM\) Throughput|Waves Per SM|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Ipc Active) " \
    | sed "s/^ */  d$1 l$2 causal=$5: /" >>"$SUMMARY"
}
run_profile() {  # ncu on the sm90 kernel: where the short-row shapes lose time
  # PROFILE_SHAPES: "D L B H causal(on|off)" entries, ';'-separated.
  each_shape "${PROFILE_SHAPES:-64 512 32 32 on;64 8192 2 32 on;128 512 32 16 off;128 8192 2 16 off}" profile_one
}
profile_src_one() {  # D L B H causal(on|off): ncu's source page as CSV, summed by stall_table.py
  local csv="$OUT/profile_src_d$1_l$2_causal_$5.csv"
  step "profile-src-d$1-l$2-$5" 180 bash -c "ncu --clock-control none -k regex:attention_fwd_sm90 --launch-skip 2 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    '$BUILD/tools/tileattn' bench --device cuda --kernel sm90 --seqlens $2 --head-dims $1 --batch $3 \
    --heads $4 --dtype bf16 --causal $5 --impl tiled --reps 1 --warmup 2 > '$csv'"
  python3 "$ROOT/bench/gpu/stall_table.py" "$csv" | sed "s/^/  d$1 l$2 causal=$5: /" >>"$SUMMARY"
}
run_profile_src() {  # ncu: where the sm90 forward's warps wait, per SASS instruction
  each_shape "${PROFILE_SRC:-128 8192 2 16 off;64 512 32 32 on}" profile_src_one
}
profile_src_bwd_one() {  # B,L,H,D causal(on|off)
  local flags="" csv="$OUT/profile_src_bwd_${1//,/x}_causal_$2.csv"
  [[ $2 == on ]] && flags="--causal"
  step "profile-src-bwd-${1//,/x}-$2" 180 bash -c "ncu --clock-control none -k regex:attention_bwd_sm90 \
    --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --page source \
    --print-source sass --csv python3 '$ROOT/bench/gpu/profile_bwd.py' --shape $1 $flags > '$csv'"
  python3 "$ROOT/bench/gpu/stall_table.py" "$csv" | sed "s/^/  bwd $1 causal=$2: /" >>"$SUMMARY"
}
run_profile_src_bwd() {  # ncu: where the sm90 backward's warps wait, per SASS instruction
  run_install
  each_shape "${PROFILE_SRC_BWD:-32,512,16,128 off;1,16384,16,128 off}" profile_src_bwd_one
}
profile_bwd_one() {  # B,L,H,D causal(on|off) deterministic(on|off); $metrics from run_profile_bwd
  local name="profile-bwd-${1//,/x}-causal$2-det$3" flags=""
  [[ $2 == on ]] && flags="$flags --causal"
  [[ $3 == on ]] && flags="$flags --deterministic"
  step "$name" 180 ncu --clock-control none -k regex:attention_bwd_sm90 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    python3 "$ROOT/bench/gpu/profile_bwd.py" --shape "$1" $flags
  awk "/=== $name:/,0" "$LOG" | grep -iE "^ +(Duration |Compute \(SM\) Throughput |Warp Cycles Per Issued Instruction |Issue Slots Busy )|stall" \
    | cut -c1-240 | sed "s/^ */  $name: /" >>"$SUMMARY"
  # Raw counters in a run of their own (a name this ncu lacks fails only this step).
  step "$name-metrics" 180 ncu --clock-control none -k regex:attention_bwd_sm90 --launch-skip 2 --launch-count 1 \
    --metrics "$metrics" python3 "$ROOT/bench/gpu/profile_bwd.py" --shape "$1" $flags
  awk "/=== $name-metrics:/,0" "$LOG" | grep -E "^ +(sm__pipe_tensor|l1tex__data|smsp__)" \
    | sed "s/^ */  $name: /; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//" >>"$SUMMARY"
}
run_profile_bwd() {  # ncu on the sm90 backward: its stall reasons, tensor-pipe and shared-memory load
  run_install
  local stalls=barrier,long_scoreboard,short_scoreboard,wait,math_pipe_throttle,mio_throttle,lg_throttle
  stalls=$stalls,membar,sleeping,dispatch_stall,no_instruction,selected,not_selected,branch_resolving
  local metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  metrics=$metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
  metrics=$metrics,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
  for s in ${stalls//,/ }; do metrics=$metrics,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio; done
  # PROFILE_BWD: "B,L,H,D causal(on|off) deterministic(on|off)" entries, ';'-separated.
  each_shape "${PROFILE_BWD:-1,16384,16,128 off off;1,16384,16,128 on off;1,16384,32,64 off off}" profile_bwd_one
}
run_bench() {
  run_install
  step bench 540 python3 "$ROOT/bench/gpu/bench.py" --out "$OUT/gpu_bench.json" \
    --suites "${BENCH_SUITES:-gap,forward,decode,varlen,overhead,backward,kvcache}" --tileattn-cli "$BUILD/tools/tileattn" \
    ${BENCH_IMPLS:+--impls "$BENCH_IMPLS"} ${BENCH_ARGS:-}
  step plot 60 python3 "$ROOT/bench/gpu/plot.py" --bench "$OUT/gpu_bench.json" --outdir "$OUT"
}
run_transformers() {
  run_install
  step transformers 420 python3 "$ROOT/bench/gpu/transformers_bench.py" --out "$OUT/transformers.json"
  grep -E "^(prefill|decode|padded)" "$LOG" | tail -8 >>"$SUMMARY"
}
run_splits() {
  run_install
  step splits 300 python3 "$ROOT/bench/gpu/decode_splits.py" --out "$OUT/decode_splits.json"
  grep -E "TB/s|us/call" "$LOG" | tail -60 >>"$SUMMARY"
}
run_traffic() {
  step traffic 240 python3 "$ROOT/bench/gpu/traffic.py" "$BUILD/tools/tileattn" "$OUT/gpu_traffic.json"
  step plot-traffic 60 python3 "$ROOT/bench/gpu/plot.py" --traffic "$OUT/gpu_traffic.json" --outdir "$OUT"
}
for stage in $stages; do
  in_time "$stage" && "run_$stage"
done

echo
echo "==== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), commit $TILEATTN_COMMIT"
cat "$SUMMARY"
if has bench; then
  # The tables the bench and traffic steps printed last.
  awk '/^#### tables/,/^=== plot/' "$LOG" | grep -v "^===" | head -140
fi
if has traffic; then
  awk '/^DRAM traffic/,0' "$LOG" | grep -v "^===" | head -8
fi
