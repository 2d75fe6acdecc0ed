#!/usr/bin/env bash
# Installs missing Debian packages (idempotent), then configures and builds jitcache in
# ./build. Used by both Quick start commands; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make libsqlite3-dev libxxhash-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev sqlite3 libssl-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is expected on the machine; find it when it is not on PATH.
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
