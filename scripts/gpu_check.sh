#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU; one command, a few minutes on an H200.
# Steps, each timed, each with a time limit:
#   rcp      bench/rcp_table.cpp: rcp.approx.ftz.f32 on every fp32 significand of [1, 2),
#            written to rcp_approx_ftz.bin (runtime/kv/rcp_approx.hpp reads it), its sha256,
#            and the special inputs held to the table's rule. Also the probe: without a GPU it
#            says so, and every later GPU step is reported skipped without running.
#   tests    the GPU tests of test_runtime (GpuTest.*, GpuChecks.*, and RuntimeTest.*):
#            device output bit-identical to the host executor for both kernels x every record
#            format x every latent-scale mode it takes, on random and adversarial data; the
#            page-major formats on examples/dsv4-mini with duplicate slots; the identity guard;
#            exhaustive checks of every hardware conversion the kernels use; MUFU.RCP
#            (-use_fast_math's 1.0f / x) on every E4M3 scale value against rn(1 / x), the one
#            step of FlashInfer's 384-byte writer jitcache's twin replaces (printed); the rcp
#            table and its rule against the hardware on all 2^32 inputs.
#   bench    bench/bench_gpu_kernels.cpp: both kernels x every format x mode at 1, 16, 256,
#            4096 and 2^20 tokens, eager and as CUDA-graph replays, medians of event timings,
#            GB/s against a 2 GiB device-to-device copy.
#   torch    scripts/gpu_torch_check.py: the torch ops on CUDA tensors through the jitcache
#            package, bit-identical to the CPU, eagerly and in a CUDA graph (skipped without
#            torch or CUDA in this Python).
# It prints each step's time, a short table last, and writes a JSON report (gpu_check.json)
# beside the step reports in $OUT/gpu-check when OUT is set, else in a new temporary folder;
# docs/testing.md describes the fields. Exit 0 when no step failed (skipped steps are fine).
#
#   scripts/gpu_check.sh              builds first (scripts/build.sh; needs apt-get)
#   scripts/gpu_check.sh --prebuilt   uses .gpu-bundle/ from scripts/gpu_bundle.sh, for a
#                                     machine without network (the device tool's)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=build
[ "${1:-}" = "--prebuilt" ] && mode=prebuilt

if [ -n "${OUT:-}" ]; then report_dir=$OUT/gpu-check; else report_dir=$(mktemp -d)/gpu-check; fi
mkdir -p "$report_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=$work/cache

if [ "$mode" = prebuilt ]; then
  bundle=$root/.gpu-bundle
  [ -x "$bundle/bin/test_runtime" ] || { echo "gpu_check: no $bundle; run scripts/gpu_bundle.sh first" >&2; exit 2; }
  # NVRTC comes from this machine's CUDA toolkit (or the pip wheel of it).
  nvrtc_dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libnvrtc.so.13" ] && nvrtc_dirs="$nvrtc_dirs:$d"
  done
  wheel=$(python3 -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.join(os.path.dirname(m.__file__), "lib"))' 2>/dev/null || true)
  [ -n "$wheel" ] && nvrtc_dirs="$nvrtc_dirs:$wheel"
  export LD_LIBRARY_PATH="$bundle/lib$nvrtc_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$bundle/bin/test_runtime" --gtest_list_tests >/dev/null 2>&1; then
    echo "==> the programs do not start with this machine's libstdc++; using the bundled one"
    export LD_LIBRARY_PATH="$bundle/compat:$LD_LIBRARY_PATH"
  fi
  if ! "$bundle/bin/test_runtime" --gtest_list_tests >/dev/null; then
    ldd "$bundle/bin/test_runtime" | grep -i "not found" >&2 || true
    echo "gpu_check: the bundled programs cannot start here" >&2
    exit 2
  fi
  export JCTEST_SOURCE_DIR=$root  # the tests read examples/ and golden files from here
  bin=$bundle/bin
  test_runtime=$bin/test_runtime bench=$bin/bench_gpu_kernels rcp_table=$bin/rcp_table
  library=$bundle/lib/libjitcache.so.1 cli=$bin/jitcache
else
  scripts/build.sh || { echo "gpu_check: the build failed" >&2; exit 2; }
  test_runtime=build/tests/test_runtime bench=build/bench/bench_gpu_kernels rcp_table=build/bench/rcp_table
  library=build/libjitcache.so.1 cli=build/tools/jitcache
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
echo "==> GPU: ${gpu:-none that nvidia-smi sees}; reports in $report_dir"

# One step: name, time limit (s), command... Its output goes to the terminal and to
# <name>.log; its status is ok, failed (with the exit code), timeout, or skipped when its
# own report says so.
steps_json=""
table=""
have_gpu=1
run_step() {
  local name=$1 limit=$2
  shift 2
  local log=$report_dir/$name.log status started ended seconds rc
  echo "==> $name"
  started=$(date +%s.%N)
  if command -v timeout >/dev/null; then
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
  else
    "$@" 2>&1 | tee "$log"
  fi
  rc=${PIPESTATUS[0]}
  ended=$(date +%s.%N)
  seconds=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout
  elif [ "$rc" -ne 0 ]; then status="failed"
  elif [ -f "$report_dir/$name.json" ] && grep -q '"status": "skipped"' "$report_dir/$name.json"; then status=skipped
  else status=ok
  fi
  echo "==> $name: $status, $seconds s"
  record_step "$name" "$status" "$seconds" "$rc"
}
record_step() {  # name status seconds exit-code
  steps_json+="${steps_json:+,}
    {\"name\": \"$1\", \"status\": \"$2\", \"seconds\": $3, \"exit_code\": $4}"
  table+=$(printf '%-7s %-8s %7s s' "$1" "$2" "$3")$'\n'
}
skip_step() {
  echo "==> $1: skipped ($2)"
  printf '{"status": "skipped", "reason": "%s"}\n' "$2" >"$report_dir/$1.json"
  record_step "$1" skipped 0.0 0
}

total_started=$SECONDS
rcp_file=$report_dir/rcp_approx_ftz.bin
run_step rcp 60 "$rcp_table" --out "$rcp_file" --json "$report_dir/rcp.json"
if grep -q '"status": "skipped"' "$report_dir/rcp.json" 2>/dev/null; then
  have_gpu=0
  reason=$(sed -n 's/.*"reason": "\(.*\)".*/\1/p' "$report_dir/rcp.json" | head -1)
  reason=${reason//\"/\'}
fi

if [ "$have_gpu" = 1 ]; then
  export JCTEST_RCP_TABLE=$rcp_file
  [ -f "$rcp_file" ] || unset JCTEST_RCP_TABLE
  run_step tests 180 env JITCACHE_DIR="$cache" "$test_runtime" --gtest_filter='GpuTest.*:GpuChecks.*:RuntimeTest.*' \
    --gtest_color=no --gtest_output="json:$report_dir/tests.gtest.json"
  run_step bench 150 "$bench" examples/glm5-mini --cache-dir "$cache" --json "$report_dir/bench.json" \
    --summary "$report_dir/bench.summary"
  # The torch ops through the jitcache package this Python has, else this tree's package
  # over the library built here (or bundled).
  python=${PYTHON:-python3}
  if "$python" -c 'import jitcache' 2>/dev/null; then
    run_step torch 120 "$python" scripts/gpu_torch_check.py --json "$report_dir/torch.json"
  else
    run_step torch 120 env PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" JITCACHE_LIBRARY="$root/$library" \
      JITCACHE_CLI="$cli" "$python" scripts/gpu_torch_check.py --json "$report_dir/torch.json"
  fi
else
  for step in tests bench torch; do skip_step "$step" "no GPU: $reason"; done
fi

# The JSON report: the steps, then each step's own report as it wrote it (null when none).
embed() { if [ -s "$1" ]; then cat "$1"; else echo null; fi; }
{
  echo "{"
  echo "  \"mode\": \"$mode\","
  echo "  \"gpu\": \"${gpu//\"/\'}\","
  echo "  \"seconds\": $((SECONDS - total_started)),"
  echo "  \"report_dir\": \"$report_dir\","
  echo "  \"steps\": [$steps_json"
  echo "  ],"
  echo "  \"rcp_table\": $(embed "$report_dir/rcp.json"),"
  echo "  \"bench\": $(embed "$report_dir/bench.json"),"
  echo "  \"torch\": $(embed "$report_dir/torch.json"),"
  echo "  \"tests_report\": \"$([ -s "$report_dir/tests.gtest.json" ] && echo "$report_dir/tests.gtest.json")\""
  echo "}"
} >"$report_dir/gpu_check.json"

failed=0
grep -qE '"status": "(failed|timeout)"' <<<"$steps_json" && failed=1
echo
echo "==> report: $report_dir/gpu_check.json"
echo "==> GPU check: ${gpu:-no GPU}, $((SECONDS - total_started)) s in all"
printf '%-7s %-8s %9s\n' step status time
printf '%s' "$table"
[ -s "$report_dir/bench.summary" ] && cat "$report_dir/bench.summary"
if [ -s "$report_dir/rcp.json" ] && grep -q '"sha256"' "$report_dir/rcp.json"; then
  echo "rcp table: $(sed -n 's/.*"sha256": "\([0-9a-f]*\)".*/\1/p' "$report_dir/rcp.json")"
fi
exit $failed
