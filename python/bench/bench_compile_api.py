"""A spec-keyed hit from a fresh process against a source-keyed hit, for a real DSL client:
numba-cuda's NVVM IR (as python/tests/test_kernels_numba.py makes it) on a warm cache.

Each sample is a fresh Python process on the same cache directory:

  spec    import jitcache, open a Runtime, declare the family, lookup(family, spec, target)
  source  the same, but the library first generates its source (numba traces and lowers the
          kernel to NVVM IR) and calls compile(), which digests the IR, checks it against the
          spec's record (shadow verification) and serves the cached cubin

    .venv/bin/python python/bench/bench_compile_api.py [--samples 7] [--target sm_100a]

Prints the median and range of each part, in milliseconds. No GPU needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

FAMILY = "bench.numba_axpy"
FACTS = {"dtype": ["float32"], "block": []}
SPEC = {"dtype": "float32", "block": "256"}

CHILD = r"""
import json, sys, time
mode, cache, target = sys.argv[1:4]
t0 = time.perf_counter()
import jitcache
rt = jitcache.Runtime(cache_dir=cache, device="none", verify_spec=0)
rt.declare_family(FAMILY, "nvvm", FACTS)
t1 = time.perf_counter()
out = {"open_ms": (t1 - t0) * 1e3}
if mode == "spec":
    found = rt.lookup(FAMILY, SPEC, target)
    assert found.outcome == "hit", found.outcome
    out["call_ms"] = (time.perf_counter() - t1) * 1e3
    out["cubin_bytes"] = len(found.kernel.cubin)
else:
    from numba import cuda, float32, int32
    import numba.cuda.compiler as ncc

    def axpy(a, x, y, n):
        i = cuda.grid(1)
        if i < n:
            y[i] = a * x[i] + y[i]

    lib, _ = ncc._compile_pyfunc_with_fixup(axpy, (float32, float32[::1], float32[::1], int32),
                                            device=False, cc=(9, 0), abi="numba")
    ir = "\n".join(lib.llvm_strs)
    t2 = time.perf_counter()
    out["generate_ms"] = (t2 - t1) * 1e3
    got = rt.compile(family=FAMILY, spec=SPEC, kind="nvvm", source=ir, entry=lib._entry_name, target=target)
    out["call_ms"] = (time.perf_counter() - t2) * 1e3
    out["from_cache"] = got.from_cache
    out["verified"] = got.verified
    out["cubin_bytes"] = len(got.cubin)
print(json.dumps(out))
"""


def child_source() -> str:
    header = f"FAMILY = {FAMILY!r}\nFACTS = {FACTS!r}\nSPEC = {SPEC!r}\n"
    return header + CHILD


def run(mode: str, cache: str, target: str) -> dict:
    done = subprocess.run([sys.executable, "-c", child_source(), mode, cache, target], check=True,
                          capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):9.1f}  ({min(values):.1f} to {max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--target", default="sm_100a")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jc_bench_compile_api_") as tmp:
        cache = f"{tmp}/cache"
        first = run("source", cache, args.target)  # compiles and records the spec
        if first["from_cache"]:
            raise SystemExit("the first compile was a hit: the cache was not cold")
        samples = {mode: [run(mode, cache, args.target) for _ in range(args.samples)] for mode in ("spec", "source")}
    assert all(s["from_cache"] and s["verified"] for s in samples["source"]), "a source hit was not verified"
    print(f"numba-cuda axpy (float32) on {args.target}, warm cache, {args.samples} fresh processes each; ms")
    print(f"{'':34s}{'median':>9s}  (range)")
    spec, source = samples["spec"], samples["source"]
    print(f"{'spec: import + open + declare':34s}{summary([s['open_ms'] for s in spec])}")
    print(f"{'spec: lookup (hit)':34s}{summary([s['call_ms'] for s in spec])}")
    print(f"{'source: import + open + declare':34s}{summary([s['open_ms'] for s in source])}")
    print(f"{'source: numba generates the IR':34s}{summary([s['generate_ms'] for s in source])}")
    print(f"{'source: compile (verified hit)':34s}{summary([s['call_ms'] for s in source])}")
    total_spec = [s["open_ms"] + s["call_ms"] for s in spec]
    total_source = [s["open_ms"] + s["generate_ms"] + s["call_ms"] for s in source]
    print(f"{'spec-keyed hit, total':34s}{summary(total_spec)}")
    print(f"{'source-keyed hit, total':34s}{summary(total_source)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
