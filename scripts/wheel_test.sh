#!/usr/bin/env bash
# The wheel as a user meets it: checks `auditwheel show` of the repaired wheel in dist/
# (scripts/wheel.sh), installs it into a fresh virtual environment together with only
# NVIDIA's compiler packages (nvidia-cuda-nvrtc, nvidia-nvjitlink, nvidia-cuda-nvcc), then
# runs scripts/wheel_check.py there in a private mount namespace in which the system CUDA
# toolkit (/usr/local/cuda*) is an empty directory and the Debian SQLite, xxHash, hiredis
# and libcrypto are empty files, so only the wheel's own copies and the pip packages can load;
# then once more with the pip packages hidden too (no compiler anywhere: hits still work),
# and last with a cache wheel (`jitcache pack`) installed: an empty cache compiles nothing.
#
# Why `unshare --mount` works here: the tests run as root in the CI sandbox (a container
# with CAP_SYS_ADMIN in its own user namespace), and a mount namespace of its own lets this
# test bind-mount over system paths without changing them for any other process. Where
# that is not permitted (not root, or a seccomp profile that forbids unshare), the test is
# skipped with exit code 3, which scripts/test.sh reports as a skip, as it does for fuzzing.
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

if ! unshare --mount true 2>/dev/null; then
  echo "note: wheel test skipped: this machine does not permit unshare --mount (root in a mount namespace is needed to hide the toolkit)" >&2
  exit 3
fi

# 1. auditwheel show: the manylinux tag, no CUDA library, nothing outside the policy but
#    the copies the repair put in jitcache.libs/.
show=$("$venv/bin/auditwheel" show "$wheel" 2>&1)
vendored=$("$venv/bin/python" -c 'import sys, zipfile
print(" ".join(n.split("/", 1)[1] for n in zipfile.ZipFile(sys.argv[1]).namelist()
               if n.startswith("jitcache.libs/") and not n.endswith("/")))' "$wheel")
"$venv/bin/python" - "$show" "$vendored" <<'EOF'
import re, sys
show, vendored = sys.argv[1], set(sys.argv[2].split())
text = " ".join(show.split())
def fail(msg):
    print(f"wheel test FAILED: auditwheel show: {msg}\n{show}", file=sys.stderr)
    sys.exit(1)
if not re.search(r'consistent with the following platform tag: "manylinux_2_[0-9]+_x86_64"', text):
    fail("the wheel is not tagged manylinux")
if re.search(r"cuda|nvrtc|nvjitlink|nvvm", text, re.IGNORECASE):
    fail("a CUDA library is named")
policy = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libstdc++.so.6", "libpthread.so.0", "libdl.so.2",
          "librt.so.1", "ld-linux-x86-64.so.2"}
named = set(re.findall(r"(\S+\.so[.0-9]*) with versions", text))
outside = named - policy - vendored
if outside:
    fail(f"libraries outside the manylinux policy and jitcache.libs/: {sorted(outside)}")
want = {"libsqlite3", "libxxhash", "libhiredis", "libcrypto"}
have = {v.split("-")[0] for v in vendored}
if not want <= have:
    fail(f"jitcache.libs/ lacks {sorted(want - have)} (has {sorted(vendored)})")
tag = re.search(r'"(manylinux_2_[0-9]+_x86_64)"', text).group(1)
print(f"ok: auditwheel show: {tag}, no CUDA library, vendored {', '.join(sorted(vendored))}")
EOF

# 2. NVIDIA's compiler packages, in .venv's versions when it has them.
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
trap 'rm -rf "$work"' EXIT
# A cache wheel of the bundled checkpoint (`jitcache pack`), made with the build's CLI and
# whatever NVRTC this machine has; step 5 installs it where no compiler can be found.
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

# 3. The checks, with the toolkit and the Debian libraries hidden. The environment is
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
# 4. No compiler anywhere: NVIDIA's pip packages hidden as well (a node given a filled cache
#    and no compiler). What is in the cache still hits; a miss says what to install.
for d in "$work"/venv/lib/python3*/site-packages/nvidia; do
  mount --bind "$work/empty-dir" "$d"
done
if ls "$work"/venv/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc* >/dev/null 2>&1; then
  echo "wheel test FAILED: the pip package's NVRTC is still visible" >&2; exit 1
fi
python "$root/scripts/wheel_check.py" "$root" "$work" --no-compilers
# 5. A fresh node given its kernels by a cache wheel: installed with pip (nothing is
#    fetched), then an empty cache with no fingerprint memo, still with no compiler anywhere.
python -m pip install -q --disable-pip-version-check --no-index --no-deps "$cache_wheel"
python "$root/scripts/wheel_check.py" "$root" "$work" --cache-wheel
EOF
echo "wheel test passed"
