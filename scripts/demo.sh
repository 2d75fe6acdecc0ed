#!/usr/bin/env bash
# Quick start, main job: build, then run jitcache end to end on the bundled GLM-5.x-shaped
# checkpoint (examples/glm5-mini: 78 calibrated layers + 1 draft layer, scales in a
# sidecar): resolved scales, a warm cache, what the cache holds, the audit, a kernel from
# outside (NVVM IR) cached by spec and shadow-verified, a fleet sharing a Redis, a cache
# wheel that lets a fresh node start compiling nothing, the kernels' resource table, and
# the error table of the identity, calibrated and per-token scales. With a GPU it also runs
# both kernels and compares them with the host executor.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh

jitcache=build/tools/jitcache
checkpoint=examples/glm5-mini
# A cache of the demo's own, so it neither needs nor touches the user's cache.
export JITCACHE_DIR="$PWD/build/demo-cache"
section() { printf '\n== %s ==\n' "$*"; }

section "Per-layer outer scales resolved from the checkpoint"
# Layers 0-4, then 74-78 (78 is the draft layer) and the provenance.
"$jitcache" scales show --checkpoint "$checkpoint" | sed -n '1,6p;76,200p'

section "Calibrating those scales from per-rank captures (synthetic: $checkpoint-captures)"
calibration="$PWD/build/demo-calibration"
captures="$checkpoint-captures"
rm -rf "$calibration" && mkdir -p "$calibration"
# The primary run (wikitext-2, TP 4) reproduces the bundled sidecar; an independent c4 run
# at TP 2 is the envelope for shallow-layer headroom.
"$jitcache" scales calibrate "$captures"/wikitext2-tp4-rank{0,1,2,3}.json \
  --envelope "$captures"/c4-tp2-rank{0,1}.json --checkpoint "$checkpoint" \
  --out "$calibration/scales.json"
echo "the file it wrote (arrays cut to their first values):"
python3 - "$calibration/scales.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for key in ("scales", "max_abs"):
    doc[key] = doc[key][:3] + ["... %d values" % len(doc[key])]
for capture in doc["provenance"]["captures"] + doc["provenance"]["envelope"]["captures"]:
    capture["sha256"] = capture["sha256"][:16] + "..."
print(json.dumps(doc, indent=2))
PY
"$jitcache" scales validate "$calibration/scales.json" --checkpoint "$checkpoint"
echo "against the checkpoint's current scales (exit 1: layers changed):"
"$jitcache" scales diff "$checkpoint" "$calibration/scales.json" || [ $? -eq 1 ]
cp -r "$checkpoint" "$calibration/checkpoint"
"$jitcache" scales install "$calibration/scales.json" --checkpoint "$calibration/checkpoint" \
  --sidecar nvfp4_ds_mla_outer_scales.json --replace
"$jitcache" scales show --checkpoint "$calibration/checkpoint" | sed -n '1,4p'

for arch in sm_90 sm_100a sm_120a; do
  section "Warm the cache for $arch (first run compiles, a second compiles nothing)"
  "$jitcache" warm --checkpoint "$checkpoint" --arch "$arch"
  "$jitcache" warm --checkpoint "$checkpoint" --arch "$arch"
done

section "What the cache holds"
"$jitcache" inspect
"$jitcache" stats

if "$jitcache" audit --help >/dev/null 2>&1; then
  section "Audit of the cache against the checkpoint"
  "$jitcache" audit --checkpoint "$checkpoint" --arch sm_100a
fi

section "Kernels from outside: NVVM IR through libNVVM and nvJitLink, keyed by family and spec"
ir=tests/runtime/compile/golden/axpy_nvvm.ll
for arch in sm_90 sm_100a sm_120a; do
  "$jitcache" compile --source "$ir" --entry axpy --arch "$arch" --family blas --fact dtype=f32
done
echo "again: a hit, checked against the source its spec was built from"
"$jitcache" compile --source "$ir" --entry axpy --arch sm_100a --family blas --fact dtype=f32
echo "a generator whose source changed without a new spec fact (the seed's bug): refused, nothing served"
sed 's/fmul float %a, %vx/fmul float %vx, %a/' "$ir" >build/demo-axpy-v2.ll
"$jitcache" compile --source build/demo-axpy-v2.ll --entry axpy --arch sm_100a --family blas --fact dtype=f32 ||
  echo "(exit $?)"

if command -v redis-server >/dev/null 2>&1; then
  section "A fleet of two nodes sharing a Redis: signed entries, each kernel compiled once"
  fleet="$PWD/build/demo-fleet"
  rm -rf "$fleet" && mkdir -p "$fleet" && chmod 700 "$fleet"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$fleet" \
    --logfile "$fleet/redis.log" --daemonize yes --pidfile "$fleet/redis.pid"
  trap 'kill "$(cat "$fleet/redis.pid" 2>/dev/null)" 2>/dev/null || true' EXIT
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  head -c 32 /dev/urandom >"$fleet/fleet.key" && chmod 600 "$fleet/fleet.key"
  export JITCACHE_REMOTE="redis://127.0.0.1:$port" JITCACHE_REMOTE_KEY_FILE="$fleet/fleet.key"
  echo "node A (cold): compiles the 4 variants and uploads them"
  JITCACHE_DIR="$fleet/node-a" "$jitcache" warm --checkpoint "$checkpoint" --arch sm_90 2>/dev/null
  echo "node B (cold local cache): loads all 4 from the remote, verified, and compiles nothing"
  JITCACHE_DIR="$fleet/node-b" "$jitcache" warm --checkpoint "$checkpoint" --arch sm_90 2>/dev/null
  JITCACHE_DIR="$fleet/node-b" "$jitcache" stats | grep -E '^(compiles|remote)'
  "$jitcache" remote status
  "$jitcache" audit --remote
  kill "$(cat "$fleet/redis.pid")" && trap - EXIT
  unset JITCACHE_REMOTE JITCACHE_REMOTE_KEY_FILE
fi

section "Ship the kernels: a cache wheel, and a fresh node that compiles nothing"
# pack makes the wheel with the `wheel` package: a small environment of the demo's own
# (.venv-tools, git-ignored), made once and reused.
tools_venv=.venv-tools
if ! "$tools_venv/bin/python" -m wheel version >/dev/null 2>&1; then
  python3 -m venv "$tools_venv"
  "$tools_venv/bin/python" -m pip install -q --disable-pip-version-check "wheel>=0.43"
fi
ship="$PWD/build/demo-ship"
rm -rf "$ship" && mkdir -p "$ship" && chmod 700 "$ship"
"$jitcache" pack --checkpoint "$checkpoint" --arch sm_90 --out "$ship/dist" --python "$tools_venv/bin/python" 2>/dev/null
# What `pip install` lays out in site-packages; the Python package finds it by its entry
# point, a C++ engine or the CLI by JITCACHE_PROVIDERS.
"$tools_venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$ship"/dist/jitcache_cache_glm5_mini_sm90-*.whl "$ship/site"
provider=$(echo "$ship"/site/jitcache_cache_glm5_mini_sm90/provider)
echo "a fresh node with the cache wheel installed, before it starts: where each variant is"
JITCACHE_DIR="$ship/node" JITCACHE_PROVIDERS="$provider" "$jitcache" coverage --checkpoint "$checkpoint" --arch sm_90
echo "its start in no-compile mode (a miss would be an error, not a compile):"
JITCACHE_DIR="$ship/node" JITCACHE_PROVIDERS="$provider" JITCACHE_NO_COMPILE=1 \
  "$jitcache" warm --checkpoint "$checkpoint" --arch sm_90 2>/dev/null
echo "why the draft layer's writer would miss on that node for another target:"
# The writer's part, without the list of every fact in its key.
{ JITCACHE_DIR="$ship/node" "$jitcache" explain --checkpoint "$checkpoint" --arch sm_100a --layer 78 || true; } |
  awk 'NR <= 2 { print } /in no tier/ { on = 1 } on && NF == 0 { exit } on { print }'

section "Every kernel variant compiled with NVRTC (registers, spills, sizes)"
"$jitcache" compile

section "Why outer scales (per layer or per token): NVFP4 round-trip error by layer magnitude"
"$jitcache" kv study

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  section "GPU: device kernels against the host executor, and timings"
  build/tests/test_runtime --gtest_filter='GpuTest.*' --gtest_brief=1
  build/bench/bench_gpu_kernels "$checkpoint"
fi
