#!/usr/bin/env bash
# Quick start, main job: build, then compile every kernel variant for sm_90, sm_100a and
# sm_120a with NVRTC (resource table), then show the identity-vs-calibrated error table
# that motivates per-layer outer scales.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
jitcache=build/tools/jitcache

echo
echo "== Kernel variants compiled with NVRTC =="
"$jitcache" compile

echo
echo "== Why per-layer outer scales: NVFP4 round-trip error by layer magnitude =="
"$jitcache" kv study
