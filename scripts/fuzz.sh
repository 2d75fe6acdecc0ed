#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in ./build-fuzz and fuzzes each for a bounded
# time: the scales parser/validator, and the remote tier's signed values and Redis URL.
# Non-interactive; fit for CI.
#
#   scripts/fuzz.sh [SECONDS]        default 30 (or $FUZZ_SECONDS)
#
# Exits 3 when no clang 16+ with libFuzzer can be had (nothing was fuzzed), and otherwise
# non-zero when the target does not build or the fuzzer finds a crash, a sanitizer report,
# a leak or a timeout;
# the reproducer is left in build-fuzz/artifacts/ (replay: build-fuzz/fuzz/fuzz_scales FILE).
# New interesting inputs accumulate in build-fuzz/corpus-scales; the committed seeds in
# fuzz/corpus/scales are only read.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-${FUZZ_SECONDS:-30}}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "usage: scripts/fuzz.sh [SECONDS]" >&2
  exit 2
fi

sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
apt_updated=0
install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "==> installing: ${missing[*]}"
  if ((!apt_updated)); then "${sudo_cmd[@]}" apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# What the top-level configure needs (tests and benchmarks are off here).
install_packages cmake make libsqlite3-dev libxxhash-dev nlohmann-json3-dev libcli11-dev libssl-dev

# clang 16+ is needed: older clang cannot instantiate libstdc++'s std::expected. libFuzzer
# itself comes with clang's compiler-rt (libclang-rt-N-dev).
clangxx=""
for v in 19 18 17 16; do
  if command -v "clang++-$v" >/dev/null 2>&1 && dpkg-query -W -f='${Status}' "libclang-rt-$v-dev" 2>/dev/null | grep -q "install ok installed"; then
    clangxx="clang++-$v"; clangc="clang-$v"; break
  fi
done
if [ -z "$clangxx" ]; then
  for v in 19 16; do
    if apt-cache show "clang-$v" >/dev/null 2>&1 || { ((!apt_updated)) && "${sudo_cmd[@]}" apt-get update -qq && apt_updated=1 && apt-cache show "clang-$v" >/dev/null 2>&1; }; then
      install_packages "clang-$v" "libclang-rt-$v-dev"
      clangxx="clang++-$v"; clangc="clang-$v"; break
    fi
  done
fi
if [ -z "$clangxx" ]; then
  echo "fuzz.sh: no clang 16+ with libFuzzer available" >&2
  exit 3
fi

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi

echo "==> building fuzz_scales and fuzz_remote with $clangxx in build-fuzz"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$clangc" -DCMAKE_CXX_COMPILER="$clangxx" \
  -DJITCACHE_FUZZ=ON -DJITCACHE_BUILD_TESTS=OFF -DJITCACHE_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_scales fuzz_remote -j "$(nproc 2>/dev/null || echo 2)"

mkdir -p build-fuzz/artifacts
# -timeout: one input taking seconds is a hang worth reporting; -rss_limit_mb: a blow-up is too.
fuzz() {
  local target=$1 corpus=$2 dict=$3
  mkdir -p "build-fuzz/corpus-$corpus"
  echo "==> fuzzing $target for ${seconds}s"
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  "build-fuzz/fuzz/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    ${dict:+-dict="$dict"} -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 \
    "build-fuzz/corpus-$corpus" "fuzz/corpus/$corpus"
}
fuzz fuzz_scales scales fuzz/scales.dict
fuzz fuzz_remote remote ""
echo "==> no crash in ${seconds}s per target"
