#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds, runs the GPU tests (device output
# bit-identical to the host executor for both kernels x both modes x both layouts; the
# identity guard on the device), then times both kernels at 64k tokens against a
# device-to-device copy. A few minutes in all. Without a GPU the tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
JITCACHE_DIR="$(mktemp -d)/cache" build/tests/test_runtime --gtest_filter='GpuTest.*:RuntimeTest.*' --gtest_color=no
build/bench/bench_gpu_kernels examples/glm5-mini
