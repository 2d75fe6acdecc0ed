"""What a user of the wheel does, run by scripts/wheel_test.sh with the interpreter of a
fresh virtual environment that holds only the repaired wheel and NVIDIA's compiler
packages, in a mount namespace where the system CUDA toolkit and the Debian libraries the
build linked (SQLite, xxHash, hiredis, libcrypto) cannot be seen.

Checks, each with a message naming what failed:
  1. ldd of the library, the CLI and the tool worker: everything resolves, to a
     manylinux_2_28 policy library other than libstdc++ (the C++ runtime, SQLite, xxHash,
     hiredis and libcrypto are linked into each of them), never to a CUDA library;
  2. `jitcache warm` of the bundled checkpoint through the wheel's `jitcache` script:
     4 variants compiled with the pip package's NVRTC; every object loaded by it and the
     processes it starts (LD_DEBUG=files) comes from the environment or the policy set;
  3. Runtime.prepare of the same checkpoint in this process: all 4 from the cache;
  4. a kernel from outside of each kind (CUDA C++ through NVRTC, NVVM IR through libNVVM,
     PTX through nvJitLink), compiled and then found in the cache;
  5. `import jitcache.vllm`;
  6. /proc/self/maps: the library from the wheel, and no SQLite, xxHash, hiredis or
     libcrypto mapped from anywhere (the wheel's are inside the library); the loader's trace
     of the Python process and its tool workers: NVRTC, libNVVM and nvJitLink from the
     environment's pip packages, nothing from the toolkit or the hidden libraries;
  7. (--no-compilers, run by wheel_test.sh after hiding the NVIDIA pip packages as well)
     with no compiler anywhere, everything above that is in the cache still hits: `jitcache
     warm`, Runtime.prepare and the three kernels from outside, with no compiler loaded;
     a miss is an UnavailableError that names the places searched and the pip package.
  8. (--cache-wheel, run by wheel_test.sh after installing a cache wheel made by `jitcache
     pack`, still with no compiler anywhere) on an empty cache with no fingerprint memo:
     the wheel is an installed provider; Runtime.prepare finds all 4 variants in it and
     compiles nothing, keying its lookups with the NVRTC build the wheel was packed with;
     `jitcache warm` with JITCACHE_PROVIDERS naming its directory does the same; no
     compiler library is loaded.

Usage: python wheel_check.py REPO_ROOT WORK_DIR   (--python-part: step 3 to 6 only;
       --no-compilers: step 7 only; --cache-wheel: step 8 only)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

TARGET = "sm_90"
# Libraries a manylinux wheel may take from the system (the policy's list, x86_64).
POLICY = re.compile(r"^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+|util|"
                    r"resolv|nsl|crypt|anl|z|expat|GL|glib-2\.0|gobject-2\.0|gthread-2\.0|ICE|SM|X11|Xext|"
                    r"Xrender)\.so(\.[0-9]+)*)$")
CUDA = re.compile(r"cuda|nvrtc|nvjitlink|nvvm|cublas|cudart", re.IGNORECASE)
HIDDEN = re.compile(r"lib(sqlite3|xxhash|hiredis|crypto)\.so")
VENDORED = re.compile(r"^lib(sqlite3|xxhash|hiredis|crypto)[-.]")


def fail(message: str) -> None:
    print(f"wheel check FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check_ldd(package: Path) -> None:
    for elf in (package / "lib" / "libjitcache.so.1", package / "bin" / "jitcache",
                package / "lib" / "jitcache-tool-worker"):
        out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            line = line.strip()
            name = os.path.basename(line.split()[0])
            if "not found" in line:
                fail(f"ldd {elf}: {line}")
            if CUDA.search(name):
                fail(f"ldd {elf}: links a CUDA library: {line}")
            if not POLICY.match(name) or name.startswith("libstdc++"):
                fail(f"ldd {elf}: {name} is not a manylinux policy library the wheel may need: {line}")
        print(f"ok: ldd {elf.relative_to(package.parent)}: only policy libraries, no libstdc++")


def loaded_objects_ok(paths: list[str], env_prefix: Path, what: str) -> None:
    for p in paths:
        if p.startswith("/usr/local/cuda"):
            fail(f"{what} loaded {p} from the system toolkit")
        if HIDDEN.search(os.path.basename(p)):
            fail(f"{what} loaded the system's {p}, not the wheel's copy")
        if CUDA.search(os.path.basename(p)) and not p.startswith(str(env_prefix)):
            fail(f"{what} loaded a CUDA library from outside the environment: {p}")


def traced(ld: Path) -> list[str]:
    """The objects every process traced into `ld` (LD_DEBUG=files) loaded: their init calls."""
    loaded = []
    for f in ld.iterdir():
        for line in f.read_text(errors="replace").splitlines():
            m = re.search(r"calling init: (\S+)", line)
            if m:
                loaded.append(m.group(1))
    return loaded


def run_traced(cmd: list[str], work: Path, name: str,
               base_env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    ld = work / f"ld-{name}"
    ld.mkdir()
    env = dict(base_env if base_env is not None else os.environ, LD_DEBUG="files", LD_DEBUG_OUTPUT=str(ld / "ld"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        fail(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc, traced(ld)


def from_env(loaded: list[str], lib: str, env_prefix: Path, what: str) -> str:
    where = [p for p in loaded if os.path.basename(p).startswith(lib)]
    if not where or not all(p.startswith(str(env_prefix)) for p in where):
        fail(f"{what} did not load {lib} from the environment {env_prefix}: {where}")
    return where[0]


def check_warm(root: Path, work: Path, env_prefix: Path) -> None:
    cmd = [str(env_prefix / "bin" / "jitcache"), "--cache-dir", str(work / "cache"), "warm",
           "--checkpoint", str(root / "examples" / "glm5-mini"), "--arch", TARGET, "--rope", "bf16", "--json"]
    proc, loaded = run_traced(cmd, work, "warm")
    result = json.loads(proc.stdout)
    if result.get("stored") != 4:
        fail(f"jitcache warm stored {result.get('stored')} variants, expected 4: {proc.stdout}")
    nvrtc = from_env(loaded, "libnvrtc.so", env_prefix, "jitcache warm")
    loaded_objects_ok(loaded, env_prefix, "jitcache warm")
    print(f"ok: jitcache warm stored 4 variants with {nvrtc}; {len(loaded)} objects loaded, none hidden")


def check_python(root: Path, work: Path, env_prefix: Path) -> None:
    import jitcache

    # The tests' kernel sources, without their pytest helpers (this environment has no pytest).
    sys.modules["conftest"] = types.ModuleType("conftest")
    sys.modules["conftest"].run_cli = None  # type: ignore[attr-defined]
    sys.path.insert(0, str(root / "python" / "tests"))
    from kernel_sources import SOURCES  # noqa: E402

    if not Path(jitcache.__file__).resolve().is_relative_to(env_prefix.resolve()):
        fail(f"import jitcache found {jitcache.__file__}, not the wheel installed in {env_prefix}")
    with jitcache.Runtime(cache_dir=work / "cache", device="none") as rt:
        model = rt.prepare(str(root / "examples" / "glm5-mini"), rope="bf16", target=TARGET)
        if (model.stats.variants, model.stats.cached) != (4, 4):
            fail(f"Runtime.prepare after jitcache warm: {model.stats}, expected 4 variants, all cached")
        print(f"ok: Runtime.prepare: {model.stats}")
        for kind, source in SOURCES.items():
            rt.declare_family(f"wheel.{kind}", kind, {"dtype": ["f32"]})
            first = rt.compile(family=f"wheel.{kind}", spec={"dtype": "f32"}, kind=kind, source=source(1.0),
                               entry="scale_copy", target=TARGET)
            again = rt.compile(family=f"wheel.{kind}", spec={"dtype": "f32"}, kind=kind, source=source(1.0),
                               entry="scale_copy", target=TARGET)
            if first.from_cache or not first.cubin.startswith(b"\x7fELF"):
                fail(f"a {kind} kernel from outside: first compile {first!r}")
            if not again.from_cache or again.cubin != first.cubin:
                fail(f"a {kind} kernel from outside was not served from the cache the second time: {again!r}")
            print(f"ok: a {kind} kernel from outside compiled ({len(first.cubin)} bytes of cubin), then cached")

    import jitcache.vllm  # noqa: F401

    print("ok: import jitcache.vllm")
    maps = sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                   if len(line.split()) >= 6 and line.split()[-1].startswith("/")})
    loaded_objects_ok(maps, env_prefix, "this Python process")
    from_env(maps, "libjitcache.so", env_prefix, "this Python process")
    mapped = [p for p in maps if VENDORED.search(os.path.basename(p))]
    if mapped:
        fail(f"this Python process mapped {mapped}: the wheel's SQLite, libcrypto, xxHash and hiredis are "
             "linked into libjitcache.so.1, none is a library of its own")
    print("ok: /proc/self/maps: the library from the wheel, with SQLite, libcrypto, xxHash and hiredis inside it")


def check_no_compilers(root: Path, work: Path, env_prefix: Path) -> None:
    cmd = [str(env_prefix / "bin" / "jitcache"), "--cache-dir", str(work / "cache"), "warm",
           "--checkpoint", str(root / "examples" / "glm5-mini"), "--arch", TARGET, "--rope", "bf16", "--json"]
    proc, loaded = run_traced(cmd, work, "no-compilers-warm")
    result = json.loads(proc.stdout)
    if (result.get("already_cached"), result.get("compiled")) != (4, 0):
        fail(f"jitcache warm without compilers: {proc.stdout}")
    if "lookups are keyed with the NVRTC this cache was last keyed with" not in proc.stderr:
        fail(f"jitcache warm without compilers did not say how it keyed its lookups:\n{proc.stderr}")
    if [p for p in loaded if CUDA.search(os.path.basename(p))]:
        fail(f"jitcache warm without compilers loaded a CUDA library: {loaded}")
    print("ok: no compiler anywhere: jitcache warm found all 4 variants in the cache")

    import jitcache

    sys.modules["conftest"] = types.ModuleType("conftest")
    sys.modules["conftest"].run_cli = None  # type: ignore[attr-defined]
    sys.path.insert(0, str(root / "python" / "tests"))
    from kernel_sources import SOURCES  # noqa: E402

    with jitcache.Runtime(cache_dir=work / "cache", device="none") as rt:
        model = rt.prepare(str(root / "examples" / "glm5-mini"), rope="bf16", target=TARGET)
        if (model.stats.variants, model.stats.cached) != (4, 4):
            fail(f"Runtime.prepare without compilers: {model.stats}, expected 4 variants, all cached")
        for kind, source in SOURCES.items():
            rt.declare_family(f"wheel.{kind}", kind, {"dtype": ["f32"]})
            hit = rt.compile(family=f"wheel.{kind}", spec={"dtype": "f32"}, kind=kind, source=source(1.0),
                             entry="scale_copy", target=TARGET)
            if not hit.from_cache:
                fail(f"a {kind} kernel from outside was not served from the cache without compilers: {hit!r}")
        print("ok: no compiler anywhere: Runtime.prepare and the 3 kernels from outside served from the cache")
        try:
            rt.prepare(str(root / "examples" / "glm5-mini"), rope="bf16", target="sm_100a")
        except jitcache.UnavailableError as e:
            for part in ("pip install nvidia-cuda-nvrtc", str(env_prefix)):
                if part not in str(e):
                    fail(f"the error of a miss without compilers does not name {part!r}: {e}")
            print("ok: no compiler anywhere: a miss is an UnavailableError naming the places and the package")
        else:
            fail("Runtime.prepare for sm_100a compiled without any compiler")
    maps = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
            if len(line.split()) >= 6 and line.split()[-1].startswith("/")]
    if [p for p in maps if re.search(r"nvrtc|nvjitlink|nvvm", os.path.basename(p), re.IGNORECASE)]:
        fail("a compiler library is mapped in the Python process without compilers")


def check_cache_wheel(root: Path, work: Path, env_prefix: Path) -> None:
    import jitcache
    from jitcache import providers

    found = providers.installed()
    if [p.name for p in found] != ["jitcache_cache_glm5_mini_sm90"]:
        fail(f"the installed cache wheel is not the one provider found: {found}")
    if not Path(found[0].directory).is_relative_to(env_prefix):
        fail(f"the cache wheel's provider is outside the environment: {found[0].directory}")
    cache = work / "cache-wheel-node"
    cache.mkdir(mode=0o700)
    with jitcache.Runtime(cache_dir=cache, device="none") as rt:
        model = rt.prepare(str(root / "examples" / "glm5-mini"), target=TARGET)
        s = model.stats
        if (s.variants, s.compiled, s.from_provider) != (4, 0, 4):
            fail(f"Runtime.prepare from the cache wheel with no compiler: {s}, expected 4 variants from the provider")
    print("ok: cache wheel: Runtime.prepare on an empty cache, no compiler anywhere: 4 of 4 from the provider, "
          "0 compiled")
    cmd = [str(env_prefix / "bin" / "jitcache"), "--cache-dir", str(work / "cache-wheel-cli"), "warm",
           "--checkpoint", str(root / "examples" / "glm5-mini"), "--arch", TARGET, "--json"]
    env = dict(os.environ, JITCACHE_PROVIDERS=found[0].directory)
    proc, loaded = run_traced(cmd, work, "cache-wheel-warm", env)
    result = json.loads(proc.stdout)
    if (result.get("already_cached"), result.get("compiled")) != (4, 0):
        fail(f"jitcache warm with JITCACHE_PROVIDERS and no compiler: {proc.stdout}\n{proc.stderr}")
    if [p for p in loaded if CUDA.search(os.path.basename(p))]:
        fail(f"jitcache warm from the cache wheel loaded a CUDA library: {loaded}")
    print("ok: cache wheel: jitcache warm with JITCACHE_PROVIDERS, no compiler anywhere: 4 of 4, 0 compiled")
    maps = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
            if len(line.split()) >= 6 and line.split()[-1].startswith("/")]
    if [p for p in maps if re.search(r"nvrtc|nvjitlink|nvvm", os.path.basename(p), re.IGNORECASE)]:
        fail("a compiler library is mapped in the Python process served by the cache wheel")


def main() -> None:
    root, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    env_prefix = Path(sys.prefix)
    if sys.argv[3:] == ["--python-part"]:
        check_python(root, work, env_prefix)
        return
    if sys.argv[3:] == ["--no-compilers"]:
        check_no_compilers(root, work, env_prefix)
        return
    if sys.argv[3:] == ["--cache-wheel"]:
        check_cache_wheel(root, work, env_prefix)
        return
    import jitcache

    check_ldd(Path(jitcache.__file__).resolve().parent)
    check_warm(root, work, env_prefix)
    # The Python part in a traced process of its own: its compiles run in tool workers,
    # whose loads the trace covers too.
    proc, loaded = run_traced([sys.executable, __file__, str(root), str(work), "--python-part"], work, "python")
    print(proc.stdout, end="")
    loaded_objects_ok(loaded, env_prefix, "the Python process and its tool workers")
    for lib in ("libnvrtc.so", "libnvvm.so", "libnvJitLink.so"):
        print(f"ok: {lib} loaded from {from_env(loaded, lib, env_prefix, 'the Python part')}")


if __name__ == "__main__":
    main()
