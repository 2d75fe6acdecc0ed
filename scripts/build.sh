#!/usr/bin/env bash
# Installs missing Debian packages (scripts/deps.sh), then configures and builds jitcache in
# ./build. Used by both Quick start commands; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

"$(dirname "$0")"/deps.sh

# The CUDA toolkit is expected on the machine; find it when it is not on PATH.
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
