#!/usr/bin/env bash
# Quick start: build, then run the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
