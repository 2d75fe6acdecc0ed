"""8 Python processes prepare one checkpoint on one cold cache: one compile per variant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import TARGET, last_json_lines, reaped

PROCESSES = 8

# Each child opens its runtime, says "ready", waits for "go" on stdin (so all 8 prepare at
# the same moment), prepares, and prints its stats as one JSON line.
CHILD = r"""
import json, sys
import jitcache
cache_dir, checkpoint, target = sys.argv[1:4]
with jitcache.Runtime(cache_dir=cache_dir, device="none", jobs=1) as rt:
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    model = rt.prepare(checkpoint, target=target)
    s = model.stats
    kernels = sorted((k.kernel, k.latent_scale, k.key, k.compiled_now) for k in model.kernels)
    print(json.dumps({"variants": s.variants, "cached": s.cached, "compiled": s.compiled,
                      "stored": s.stored, "kernels": kernels,
                      "scales": [layer.scale for layer in model.layers]}), flush=True)
"""


def test_eight_processes_one_cold_cache(glm5_mini: Path, cache_dir: Path, python_env: dict, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    children = [
        subprocess.Popen(
            [sys.executable, str(script), str(cache_dir), str(glm5_mini), TARGET],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_env,
        )
        for _ in range(PROCESSES)
    ]
    with reaped(children):
        for child in children:
            line = child.stdout.readline().strip()
            assert line == "ready", (line, child.stderr.read() if child.poll() is not None else "")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        results = last_json_lines(children, timeout=240)

    variants = {r["variants"] for r in results}
    assert variants == {4}
    total_compiled = sum(r["compiled"] for r in results)
    assert total_compiled == 4, [(r["cached"], r["compiled"]) for r in results]
    for r in results:
        assert r["cached"] + r["compiled"] == r["variants"]
        assert sum(1 for k in r["kernels"] if k[3]) == r["compiled"]
    # every process got the same kernels (same keys) and the same scales
    assert len({json.dumps([k[:3] for k in r["kernels"]]) for r in results}) == 1
    assert len({json.dumps(r["scales"]) for r in results}) == 1
    # each variant compiled by exactly one process
    compiled_keys = [k[2] for r in results for k in r["kernels"] if k[3]]
    assert sorted(compiled_keys) == sorted({k[2] for k in results[0]["kernels"]})
