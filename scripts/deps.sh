#!/usr/bin/env bash
# Installs the Debian packages jitcache builds against when any is missing (apt-get,
# idempotent). Used by scripts/build.sh, and before `pip install .` on a fresh machine.
set -euo pipefail

packages=(cmake g++ make libsqlite3-dev libxxhash-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev sqlite3 libssl-dev pkg-config
          libhiredis-dev redis-server)
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
