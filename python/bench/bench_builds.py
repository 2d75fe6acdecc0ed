"""Two builds of jitcache on the same machine, in one run: the source build (./build, Debian's
GCC and libstdc++, Debian's shared SQLite, xxHash, hiredis and libcrypto) against the wheel
(dist/, zig's clang for glibc 2.28 with libc++ and the four libraries linked statically).
Each sample is a fresh process; the two builds alternate, so load on the machine falls on
both alike.

Figures, per build:
  import jitcache, Runtime(...), Runtime.prepare() of the bundled checkpoint on a warm cache
  (and the library's own measure of it, stats.wall_ms);
  `jitcache warm` on a warm cache and `jitcache --version`, through each build's CLI;
  `jitcache warm` on an empty cache: the compiler's fingerprint (SHA-256 of NVRTC's file),
  4 variants generated and compiled with NVRTC, verified and stored;
  a CUDA C++ kernel from outside compiled through the tool worker on an empty cache, and
  the same request again in that process (a cache hit).

    .venv/bin/python python/bench/bench_builds.py --wheel-site DIR [--samples 15]

DIR is the wheel installed with `pip install --no-deps --target DIR dist/jitcache-*.whl`.
The interpreter must have NVIDIA's NVRTC (a pip package) or the toolkit; no GPU is needed.
Prints the median and range of each figure, in milliseconds, and the wheel's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "examples" / "glm5-mini"
TARGET = "sm_90"

PYTHON_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import jitcache
t1 = time.perf_counter()
rt = jitcache.Runtime(cache_dir=sys.argv[1], device="none")
t2 = time.perf_counter()
model = rt.prepare(sys.argv[2], target=sys.argv[3])
t3 = time.perf_counter()
out = {"import jitcache": (t1 - t0) * 1e3, "Runtime(...)": (t2 - t1) * 1e3,
       "prepare() warm": (t3 - t2) * 1e3, "prepare() warm, in the library": model.stats.wall_ms,
       "compiled": model.stats.compiled}
if len(sys.argv) > 4:
    source = open(sys.argv[4]).read()
    rt.declare_family("bench.builds", "cuda", {"dtype": ["f32"]})
    t4 = time.perf_counter()
    first = rt.compile(family="bench.builds", spec={"dtype": "f32"}, kind="cuda", source=source,
                       entry="scale_copy", target=sys.argv[3])
    t5 = time.perf_counter()
    again = rt.compile(family="bench.builds", spec={"dtype": "f32"}, kind="cuda", source=source,
                       entry="scale_copy", target=sys.argv[3])
    t6 = time.perf_counter()
    assert not first.from_cache and again.from_cache and again.cubin == first.cubin
    out["CUDA C++ from outside, compiled"] = (t5 - t4) * 1e3
    out["CUDA C++ from outside, cache hit"] = (t6 - t5) * 1e3
print(json.dumps(out))
"""

KERNEL = r"""extern "C" __global__ void scale_copy(const float* x, float* y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 2.0f;
}
"""


class Build:
    def __init__(self, name: str, env: dict[str, str], cli: Path) -> None:
        self.name, self.env, self.cli = name, env, cli
        self.samples: dict[str, list[float]] = {}

    def add(self, figure: str, value: float) -> None:
        self.samples.setdefault(figure, []).append(value)

    def run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env, "JITCACHE_LOG_LEVEL": "warning"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode != 0:
            sys.exit(f"{self.name}: `{' '.join(cmd)}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def python(self, *args: str) -> dict:
        return json.loads(self.run([sys.executable, "-c", PYTHON_CHILD, *args]).stdout.strip().splitlines()[-1])

    def timed_cli(self, figure: str, *args: str) -> None:
        t0 = time.perf_counter()
        self.run([str(self.cli), *args])
        self.add(figure, (time.perf_counter() - t0) * 1e3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-site", required=True, type=Path)
    parser.add_argument("--build-dir", default=ROOT / "build", type=Path)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--cold-samples", type=int, default=5)
    args = parser.parse_args()
    site = args.wheel_site.resolve()
    builds = [
        Build("source build", {"PYTHONPATH": str(ROOT / "python"),
                               "JITCACHE_LIBRARY": str(args.build_dir / "libjitcache.so.1")},
              args.build_dir / "tools" / "jitcache"),
        Build("wheel", {"PYTHONPATH": str(site)}, site / "jitcache" / "bin" / "jitcache"),
    ]
    with tempfile.TemporaryDirectory(prefix="jitcache-bench-builds-") as tmp:
        kernel = Path(tmp) / "kernel.cu"
        kernel.write_text(KERNEL)
        warm = {}
        for b in builds:  # one warm cache per build, filled by its own CLI
            warm[b.name] = Path(tmp) / f"warm-{len(warm)}"
            b.run([str(b.cli), "--cache-dir", str(warm[b.name]), "warm", "--checkpoint", str(CHECKPOINT),
                   "--arch", TARGET])
        for i in range(args.samples):
            for b in builds:
                cache = str(warm[b.name])
                r = b.python(cache, str(CHECKPOINT), TARGET)
                if r.pop("compiled"):
                    sys.exit(f"{b.name}: a warm prepare() compiled")
                for k, v in r.items():
                    b.add(k, v)
                b.timed_cli("`jitcache warm`, warm cache", "--cache-dir", cache, "warm", "--checkpoint",
                            str(CHECKPOINT), "--arch", TARGET)
                b.timed_cli("`jitcache --version`", "--version")
        for i in range(args.cold_samples):
            for b in builds:
                cold = Path(tmp) / f"cold-{b.name.replace(' ', '-')}-{i}"
                b.timed_cli("`jitcache warm`, empty cache (4 compiles)", "--cache-dir", str(cold), "warm",
                            "--checkpoint", str(CHECKPOINT), "--arch", TARGET)
                r = b.python(str(Path(tmp) / f"cold-py-{b.name.replace(' ', '-')}-{i}"), str(CHECKPOINT),
                             TARGET, str(kernel))
                for k in ("CUDA C++ from outside, compiled", "CUDA C++ from outside, cache hit"):
                    b.add(k, r[k])
    source, wheel = builds
    print(f"{'median ms [min, max]':<46} {'source build':>24} {'wheel':>24} {'wheel/source':>13}")
    for figure, values in source.samples.items():
        w = wheel.samples[figure]
        cells = [f"{statistics.median(v):8.2f} [{min(v):.2f}, {max(v):.2f}]" for v in (values, w)]
        ratio = statistics.median(w) / statistics.median(values)
        print(f"{figure:<46} {cells[0]:>24} {cells[1]:>24} {ratio:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
