#!/usr/bin/env bash
# The project-local Python environment for the tests: creates .venv once (git-ignored) with
# python/requirements-test.txt (vllm, torch, numpy, pytest, scikit-build-core), reinstalls
# only when that file changes, then installs jitcache itself into it with pip, through
# pyproject.toml, reusing ./build (scripts/build.sh) so nothing is compiled twice.
# Prints the environment's python on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
requirements=python/requirements-test.txt
stamp=$venv/.jitcache-requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
python=${JITCACHE_PYTHON:-python3}

if [ ! -x "$venv/bin/python" ] && ! "$python" -c "import venv, ensurepip" >/dev/null 2>&1; then
  # A Debian system Python keeps venv and ensurepip in a package of their own.
  echo "==> installing python3-venv" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv >&2
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "==> installing $requirements into $venv (into a new one: about 4 minutes and 9 GB)" >&2
  start=$(date +%s)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$stamp"
  echo "==> $venv ready in $(( $(date +%s) - start )) s" >&2
fi

# jitcache from this tree. The settings match scripts/build.sh's, so the existing build is
# reused as it is (same generator, build type and options); only install and packing run.
CMAKE_GENERATOR="Unix Makefiles" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-deps --no-build-isolation --force-reinstall \
  -C build-dir=build -C cmake.build-type=RelWithDebInfo -C install.strip=false \
  -C cmake.define.JITCACHE_BUILD_TESTS=ON -C cmake.define.JITCACHE_BUILD_BENCH=ON . >&2
echo "$venv/bin/python"
