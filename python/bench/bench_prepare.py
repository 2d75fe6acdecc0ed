"""prepare() on a warm cache from Python, each sample a fresh process, against the
library's own measure of the same call (Model.stats.wall_ms) and the C++ benchmark
(bench_runtime's BM_PrepareWarm_FreshProcess).

    .venv/bin/python python/bench/bench_prepare.py [--samples 20] [--checkpoint DIR]

Prints one line per figure: median and range over the samples, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import jitcache
t1 = time.perf_counter()
rt = jitcache.Runtime(cache_dir=sys.argv[1], device="none")
t2 = time.perf_counter()
model = rt.prepare(sys.argv[2], target="sm_90")
t3 = time.perf_counter()
layers = model.layers
t4 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "open_ms": (t2 - t1) * 1e3,
                  "prepare_ms": (t3 - t2) * 1e3, "library_prepare_ms": model.stats.wall_ms,
                  "layers_ms": (t4 - t3) * 1e3, "compiled": model.stats.compiled,
                  "num_layers": len(layers)}))
"""


def run_child(cache: str, checkpoint: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, cache, checkpoint], check=True,
                          capture_output=True, text=True, env={**os.environ, "JITCACHE_LOG_LEVEL": "warning"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--checkpoint", default=str(Path(__file__).resolve().parents[2] / "examples" / "glm5-mini"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitcache-bench-") as tmp:
        cache = os.path.join(tmp, "cache")
        first = run_child(cache, args.checkpoint)  # cold: fills the cache
        print(f"cold prepare (compiles {first['compiled']} variants): {first['prepare_ms']:.1f} ms")
        samples = [run_child(cache, args.checkpoint) for _ in range(args.samples)]
    if any(s["compiled"] for s in samples):
        print("error: a warm sample compiled", file=sys.stderr)
        return 1
    print(f"warm, fresh process each, {args.samples} samples (median [min, max]):")
    for key, label in [("import_ms", "import jitcache"), ("open_ms", "Runtime(...)"),
                       ("prepare_ms", "Runtime.prepare() seen from Python"),
                       ("library_prepare_ms", "  of which inside the library (stats.wall_ms)"),
                       ("layers_ms", "Model.layers (79 LayerInfo, first use)")]:
        values = [s[key] for s in samples]
        print(f"  {label:<46} {statistics.median(values):8.3f} ms  [{min(values):.3f}, {max(values):.3f}]")
    overhead = [s["prepare_ms"] - s["library_prepare_ms"] for s in samples]
    print(f"  {'Python overhead of prepare()':<46} {statistics.median(overhead):8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
