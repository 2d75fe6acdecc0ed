#!/usr/bin/env bash
# Quick start: build, fuzz the scales parser and the remote tier's value decoder briefly,
# then run the whole test suite: the C++ tests through ctest, then the Python package's
# through pytest in the project-local environment .venv (made once by
# scripts/python_env.sh; the first time takes minutes), then the wheel as a user installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh

# A short libFuzzer run of the scales parser/validator (clang 16+, installed on demand).
# A crash fails the run; a machine where no such clang can be had skips it with a note.
set +e
scripts/fuzz.sh "${JITCACHE_FUZZ_SECONDS:-20}"
fuzz_rc=$?
set -e
if [ "$fuzz_rc" -eq 3 ]; then
  echo "note: fuzzing skipped: no clang 16+ with libFuzzer on this machine"
elif [ "$fuzz_rc" -ne 0 ]; then
  exit "$fuzz_rc"
fi

python=$(scripts/python_env.sh)

ctest_rc=0
ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@" || ctest_rc=$?

# The installed package is what is tested (the tests run from outside the source tree's
# python/ folder, so `import jitcache` is the one pip installed). The CLI the tests compare
# with is the build's.
pytest_rc=0
JITCACHE_CLI="$PWD/build/tools/jitcache" "$python" -m pytest -p no:cacheprovider -q python/tests \
  || pytest_rc=$?
if [ "$pytest_rc" -eq 5 ]; then
  echo "error: pytest collected no tests from python/tests" >&2
fi

# The SGLang plugin's tests against the real sglang package, in .venv-sglang: sglang
# installed without its dependencies over .venv (its pins conflict with vLLM's; made once
# by scripts/sglang_env.sh, about a minute). The main run above skips that file.
sglang_rc=0
sglang_python=$(scripts/sglang_env.sh "$python") || sglang_rc=$?
if [ "$sglang_rc" -eq 0 ]; then
  JITCACHE_CLI="$PWD/build/tools/jitcache" "$sglang_python" -m pytest -p no:cacheprovider -q \
    python/tests/test_sglang.py || sglang_rc=$?
fi
[ "$sglang_rc" -eq 0 ] || pytest_rc=$sglang_rc

# The self-contained wheel (scripts/wheel.sh, ./build reused), installed into a fresh
# environment with only NVIDIA's compiler packages and run with the toolkit and the Debian
# libraries hidden (scripts/wheel_test.sh; exit 3: not permitted here, skipped).
wheel_rc=0
scripts/wheel.sh >/dev/null && scripts/wheel_test.sh || wheel_rc=$?
if [ "$wheel_rc" -eq 3 ]; then
  echo "note: wheel test skipped: unshare --mount is not permitted on this machine"
  wheel_rc=0
fi
if [ "$ctest_rc" -ne 0 ] || [ "$pytest_rc" -ne 0 ] || [ "$wheel_rc" -ne 0 ]; then
  echo "ctest exit $ctest_rc, pytest exit $pytest_rc, wheel test exit $wheel_rc" >&2
  exit 1
fi
