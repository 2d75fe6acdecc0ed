#!/usr/bin/env bash
# The wheel as a user meets it. First, what it is (scripts/wheel.sh builds it into dist/):
# `auditwheel show` says manylinux_2_28, and readelf finds in none of its ELF files a glibc
# symbol newer than 2.28, a libstdc++ dependency or an export beyond the C ABI; then the
# package's own test suite (python/tests) runs against the wheel's library, CLI and tool
# worker. Then it installs the wheel into a fresh virtual environment together with only
# NVIDIA's compiler packages (nvidia-cuda-nvrtc, nvidia-nvjitlink, nvidia-cuda-nvcc), and
# runs scripts/wheel_check.py there in a private mount namespace in which the system CUDA
# toolkit (/usr/local/cuda*) is an empty directory and the Debian SQLite, xxHash, hiredis
# and libcrypto are empty files, so only the wheel's own code and the pip packages can load;
# then once more with the pip packages hidden too (no compiler anywhere: hits still work),
# and last with a cache wheel (`jitcache pack`) installed: an empty cache compiles nothing.
#
# Why `unshare --mount` works here: the tests run as root in the CI sandbox (a container
# with CAP_SYS_ADMIN in its own user namespace), and a mount namespace of its own lets this
# test bind-mount over system paths without changing them for any other process. Where
# that is not permitted (not root, or a seccomp profile that forbids unshare), the namespace part
# is skipped with exit code 3, which scripts/test.sh reports as a skip, as it does for fuzzing.
#
# NVIDIA's wheels are downloaded once into dist/nvidia-wheels (git-ignored), in the
# versions .venv already has where it has them (pip's cache then serves them).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${JITCACHE_VENV:-.venv}
wheel=$(ls dist/jitcache-*-manylinux*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "error: no repaired wheel in dist/; run scripts/wheel.sh first" >&2
  exit 2
fi

# 1. The wheel's ELF files, before anything runs (docs/python.md, "The glibc floor"):
#    `auditwheel show` says manylinux_2_28 and names no CUDA library; readelf finds no glibc
#    symbol version above 2.28, no libstdc++ (GLIBCXX_, CXXABI_) and no library but the
#    policy's in any ELF file; libjitcache.so.1 exports the C ABI alone
#    (cmake/check_exports.cmake) and the CLI and the tool worker export nothing, so no C++
#    runtime or dependency symbol leaves any of them. The symbols are all that is checked
#    here: no glibc 2.28 system is at hand to run the wheel on.
show=$(.venv-wheel/bin/auditwheel show "$wheel" 2>&1)
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/jitcache-wheel-elf.XXXXXX")
trap 'rm -rf "$unpacked"' EXIT
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
  --target "$unpacked/site" "$wheel" >&2
elves=()
while IFS= read -r f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && elves+=("$f")
done < <(find "$unpacked" -type f | sort)
if ((${#elves[@]} < 3)); then
  echo "wheel test FAILED: the wheel holds ${#elves[@]} ELF files, expected the library, the CLI and the tool worker" >&2
  exit 1
fi
for f in "${elves[@]}"; do
  echo "== $f"
  readelf -W --version-info "$f" | sed -n 's/.*Name: \([A-Z_]*[0-9][0-9.]*\).*/need \1/p' | sort -u
  readelf -W -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/needed \1/p'
  nm -D --defined-only "$f" | awk '{print "exports " $NF}'
done > "$unpacked/elf.txt"
"$venv/bin/python" - "$show" "$unpacked" <<'EOF'
import re, sys
from pathlib import Path
show, unpacked = sys.argv[1], Path(sys.argv[2])
text = " ".join(show.split())
def fail(msg):
    print(f"wheel test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)
m = re.search(r'consistent with the following platform tag: "(manylinux_2_[0-9]+_x86_64)"', text)
if not m or m.group(1) != "manylinux_2_28_x86_64":
    fail(f"auditwheel show: the wheel is not manylinux_2_28_x86_64:\n{show}")
if re.search(r"cuda|nvrtc|nvjitlink|nvvm", text, re.IGNORECASE):
    fail(f"auditwheel show: a CUDA library is named:\n{show}")
policy = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2", "librt.so.1",
          "ld-linux-x86-64.so.2"}
# What the linker defines in every program.
linker_defined = re.compile(r"^(_init|_fini|_edata|_end|__bss_start|_IO_stdin_used)$")
facts: dict[str, list[list[str]]] = {}
for line in (unpacked / "elf.txt").read_text().splitlines():
    if line.startswith("== "):
        elf = line[3:]
        facts[elf] = []
    else:
        facts[elf].append(line.split(" ", 1))
glibc_max = (0, 0)
for path, rows in facts.items():
    name = str(Path(path).relative_to(unpacked))
    for kind, value in rows:
        if kind == "need" and value.startswith("GLIBC_"):
            version = tuple(int(x) for x in value[len("GLIBC_"):].split("."))
            if version > (2, 28):
                fail(f"{name} needs {value}, newer than glibc 2.28")
            glibc_max = max(glibc_max, version)
        if kind == "need" and re.match(r"(GLIBCXX|CXXABI)_", value):
            fail(f"{name} needs {value} of libstdc++: the C++ runtime must be linked in")
        if kind == "needed" and value not in policy:
            fail(f"{name} needs {value}, not a manylinux_2_28 policy library")
        if kind == "exports" and ".so" not in name and not linker_defined.match(value.split("@")[0]):
            fail(f"{name} exports {value}: a program exports nothing")
print(f"ok: auditwheel show: manylinux_2_28_x86_64, no CUDA library; {len(facts)} ELF files: glibc "
      f"symbols up to {'.'.join(map(str, glibc_max))}, no libstdc++, only policy libraries")
EOF
lib=$(printf '%s\n' "${elves[@]}" | grep '/libjitcache\.so\.1$')
cmake -DLIBRARY="$lib" -DNM=nm -DREADELF=readelf -DHEADER=include/jitcache/jitcache.h \
  -DVERSION_SCRIPT=cmake/jitcache.map -DSONAME=libjitcache.so.1 -P cmake/check_exports.cmake

# 2. The package's test suite (python/tests, the one scripts/test.sh runs against the
#    Debian build installed in .venv) against the wheel's build: the package, library, CLI
#    and tool worker the wheel installed come first on the path, with .venv's pytest, numpy,
#    torch and vLLM. JITCACHE_VENV is this script's, not the library's: the CLI would warn
#    of it, and the tests count its warnings.
python_abs=$(cd "$(dirname "$venv/bin/python")" && pwd)/python
(cd "$unpacked" && PYTHONPATH="$unpacked/site" JITCACHE_CLI="$unpacked/site/jitcache/bin/jitcache" \
  "$python_abs" -c 'import jitcache, sys; sys.exit(0 if jitcache.__file__.startswith(sys.argv[1]) else
    f"import jitcache found {jitcache.__file__}, not the wheel in {sys.argv[1]}")' "$unpacked/site" \
  && env -u JITCACHE_VENV PYTHONPATH="$unpacked/site" JITCACHE_CLI="$unpacked/site/jitcache/bin/jitcache" \
  "$python_abs" -m pytest -p no:cacheprovider -q "$OLDPWD/python/tests")
echo "ok: the package's tests passed against the wheel's library, CLI and tool worker"

if ! unshare --mount true 2>/dev/null; then
  echo "note: the rest of the wheel test skipped (its symbol checks and the package's tests passed): this machine does not permit unshare --mount (root in a mount namespace is needed to hide the toolkit)" >&2
  exit 3
fi

# 3. NVIDIA's compiler packages, in .venv's versions when it has them.
pkgs=()
for p in nvidia-cuda-nvrtc nvidia-nvjitlink nvidia-cuda-nvcc; do
  v=$("$venv/bin/python" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p' || true)
  pkgs+=("$p${v:+==$v}")
done
wheels=dist/nvidia-wheels
stamp="$wheels/.requested"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "${pkgs[*]}" ]; then
  rm -rf "$wheels"
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$wheels" "${pkgs[@]}" >&2
  echo "${pkgs[*]}" > "$stamp"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/jitcache-wheel-test.XXXXXX")
trap 'rm -rf "$work" "$unpacked"' EXIT
# A cache wheel of the bundled checkpoint (`jitcache pack`), made with the build's CLI and
# whatever NVRTC this machine has; step 6 installs it where no compiler can be found.
mkdir -m 700 "$work/pack-cache"
build/tools/jitcache --cache-dir "$work/pack-cache" pack --checkpoint examples/glm5-mini --arch sm_90 \
  --out "$work/cache-wheels" --python "$venv/bin/python" --json > "$work/pack.json"
cache_wheel=$("$venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["wheel"])' "$work/pack.json")
echo "ok: cache wheel $(basename "$cache_wheel")"
python=${JITCACHE_PYTHON:-python3}
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" \
  "$wheel" "${pkgs[@]}" >&2
echo "ok: fresh environment: $("$work/venv/bin/python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | grep -v -E '^(pip|setuptools)==' | tr '\n' ' ')"

# 4. The checks, with the toolkit and the Debian libraries hidden. The environment is
#    emptied too, so no variable points at a toolkit or another copy of jitcache.
unshare --mount -- env -i PATH="$work/venv/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME="$work" TMPDIR="$work" \
  bash -s "$PWD" "$work" "$cache_wheel" <<'EOF'
set -euo pipefail
root=$1 work=$2 cache_wheel=$3
mount --make-rprivate /
mkdir "$work/empty-dir"
: > "$work/empty-file"
for d in /usr/local/cuda*; do
  [ -d "$d" ] && mount --bind "$work/empty-dir" "$d"
done
for f in $(ldconfig -p | sed -n 's/.*=> \(.*lib\(sqlite3\|xxhash\|hiredis\|crypto\)\.so.*\)$/\1/p'); do
  readlink -f "$f"
done | sort -u | while read -r f; do
  mount --bind "$work/empty-file" "$f"
done
# The hiding itself is checked, so the test cannot pass by not hiding anything.
if [ -e /usr/local/cuda/bin/nvcc ] || ls /usr/local/cuda*/lib64/libnvrtc* >/dev/null 2>&1; then
  echo "wheel test FAILED: the toolkit is still visible" >&2; exit 1
fi
if python -c 'import ctypes; ctypes.CDLL("libsqlite3.so.0")' 2>/dev/null; then
  echo "wheel test FAILED: the system's libsqlite3 still loads" >&2; exit 1
fi
echo "ok: toolkit and Debian libraries hidden"
cd "$work"
python "$root/scripts/wheel_check.py" "$root" "$work"
# 5. No compiler anywhere: NVIDIA's pip packages hidden as well (a node given a filled cache
#    and no compiler). What is in the cache still hits; a miss says what to install.
for d in "$work"/venv/lib/python3*/site-packages/nvidia; do
  mount --bind "$work/empty-dir" "$d"
done
if ls "$work"/venv/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc* >/dev/null 2>&1; then
  echo "wheel test FAILED: the pip package's NVRTC is still visible" >&2; exit 1
fi
python "$root/scripts/wheel_check.py" "$root" "$work" --no-compilers
# 6. A fresh node given its kernels by a cache wheel: installed with pip (nothing is
#    fetched), then an empty cache with no fingerprint memo, still with no compiler anywhere.
python -m pip install -q --disable-pip-version-check --no-index --no-deps "$cache_wheel"
python "$root/scripts/wheel_check.py" "$root" "$work" --cache-wheel
EOF
echo "wheel test passed"
