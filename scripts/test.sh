#!/usr/bin/env bash
# Quick start: build, fuzz the scales parser briefly, then run the whole test suite
# through ctest.
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

ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
