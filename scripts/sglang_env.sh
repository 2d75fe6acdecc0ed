#!/usr/bin/env bash
# The environment of the SGLang tests (python/tests/test_sglang.py): .venv-sglang, git-ignored,
# made once and reused. SGLang 0.5.23 pins torch, transformers, flashinfer, openai and more
# to versions other than the main environment's (vLLM's), so it cannot join that
# environment; a second torch + CUDA stack would cost gigabytes. Instead .venv-sglang layers
# over the main environment: its own site-packages comes first on sys.path and holds
# sglang (installed --no-deps) and the few light packages the modules the tests import need
# that the main environment lacks; a .pth file then adds the main environment's
# site-packages (torch, numpy, pytest, jitcache, ...) after it.
#
# Usage: scripts/sglang_env.sh [BASE_PYTHON]  (default: .venv/bin/python, made by
# scripts/python_env.sh). Prints the environment's python on the last line. Reinstalls only
# when this script's pins or the base interpreter change.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:-${JITCACHE_SGLANG_BASE_PYTHON:-.venv/bin/python}}
venv=.venv-sglang
sglang_version=0.5.23
# What SGLang's modules that the tests load (the plugin loader, server args, the KV pools
# and their configurator) import at module level and the main environment lacks: IPython
# (sglang/utils.py) and gguf (the quantization registry). SGLang 0.5.23 leaves both
# unpinned; these are the versions tested. They come with their own (pure Python) deps.
light_deps=(
  "ipython==9.19.1"
  "gguf==0.19.0"
)

if [ ! -x "$base" ]; then
  echo "error: base python $base not found (make it with scripts/python_env.sh, or pass one)" >&2
  exit 2
fi
base=$(cd "$(dirname "$base")" && pwd)/$(basename "$base")
base_site=$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
want=$(printf '%s\n' "$base" "$base_site" "$sglang_version" "${light_deps[@]}" | sha256sum | cut -d' ' -f1)
stamp=$venv/.jitcache-sglang.sha256

if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  start=$(date +%s)
  echo "==> making $venv over $base (sglang ${sglang_version}, no deps)" >&2
  rm -rf "$venv"
  # The base's own interpreter, without pip: pip comes from the base's site-packages.
  "$base" -m venv --without-pip "$venv"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$base_site" > "$site/zz-jitcache-base-environment.pth"
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-warn-conflicts)
  "${pip[@]}" --no-deps "sglang==${sglang_version}" >&2
  "${pip[@]}" "${light_deps[@]}" >&2
  echo "$want" > "$stamp"
  echo "==> $venv ready in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv/bin/python"
