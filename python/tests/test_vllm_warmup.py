"""jitcache.vllm against the real vLLM 0.33 classes: the plugin registers jitcache's metrics in
vLLM's Prometheus registry, and jitcache's kernels go through vLLM's JIT warmup registry
(JitWarmupRegistry, compiled by its warmup()) and under its JIT monitor afterwards. In a
fresh child process: importing vLLM takes seconds and leaves module state behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_vllm import _dev_plugin_dist, installed_entry_point, needs_vllm

TARGET = "sm_90"

CHILD = """
import json, sys
from vllm.plugins import load_general_plugins
from vllm.v1.metrics.prometheus import get_prometheus_registry
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
from vllm.utils import jit_monitor
import jitcache.vllm as jv

from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())  # as a vLLM process does when it starts

checkpoint, target, cache = sys.argv[1], sys.argv[2], sys.argv[3]
labels = {"cache_dir": cache, "scope": "process"}
out = {}
load_general_plugins()  # jitcache's register(): its collector joins vLLM's registry
registry = get_prometheus_registry()
out["registered_again"] = jv.register_metrics()  # idempotent
value = registry.get_sample_value

out["outside"] = jv.register_warmup(checkpoint, target)  # no model runner: no registry
runner_registry = JitWarmupRegistry(vllm_config=None)
with runner_registry.activate():  # what GPUModelRunner does while it loads the model
    out["inside"] = jv.register_warmup(checkpoint, target)
    out["again"] = jv.register_warmup(checkpoint, target)  # every layer registers the same
out["registrations"] = len(runner_registry)
out["before_warmup"] = jv.warmed_model(checkpoint, target) is None
runner_registry.warmup()  # what kernel_warmup() runs
model = jv.warmed_model(checkpoint, target)
out["warmed"] = [model.stats.variants, model.stats.compiled, model.target]
out["compiles_metric"] = value("jitcache_compiles_total", labels)
out["entries_metric"] = value("jitcache_cache_entries", {"cache_dir": cache})

jit_monitor.activate(mode="error")  # what the worker does after warmup
again = jv.prepare_model(checkpoint, target=target)  # warmed: nothing compiles, nothing reported
out["after_cached"] = again.stats.compiled
try:
    jv.prepare_model(checkpoint, target=target, format="b12x-368")  # not warmed: compiles
    out["after_compile"] = None
except RuntimeError as exc:
    out["after_compile"] = str(exc)
out["compiles_after"] = value("jitcache_compiles_total", labels)
print("RESULT " + json.dumps(out))
"""


@needs_vllm
def test_plugin_metrics_and_warmup_through_vllms_registries(
    tmp_path: Path, glm5_mini: Path, python_env: dict[str, str]
) -> None:
    pytest.importorskip("prometheus_client")
    cache = tmp_path / "cache"
    env = dict(python_env, JITCACHE_DIR=str(cache))
    for name in ("VLLM_PLUGINS", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    if installed_entry_point() is None or os.environ.get("JCTEST_DEV_PLUGIN") == "1":
        dev = _dev_plugin_dist(tmp_path / "site")
        env["PYTHONPATH"] = os.pathsep.join([str(dev), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(glm5_mini), TARGET, str(cache)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    got = json.loads(line[len("RESULT "):])
    assert got["registered_again"] is True
    assert got["outside"] is False
    assert got["inside"] is True and got["again"] is True
    assert got["registrations"] == 1, "one registration per checkpoint, however many layers"
    assert got["before_warmup"] is True
    assert got["warmed"] == [4, 4, TARGET]
    assert got["compiles_metric"] == 4, "the warmup's compiles, in vLLM's registry"
    assert got["entries_metric"] == 4
    assert got["after_cached"] == 0
    assert got["after_compile"] is not None
    assert "jitcache kernel JIT compilation during inference" in got["after_compile"]
    assert "b12x-368" in got["after_compile"]
    assert got["compiles_after"] == 8, "closed runtimes' compiles stay counted"
    # Progress through vLLM's logger (its format: "INFO ... [file:line] message").
    logged = done.stdout + done.stderr
    assert "jitcache: 4 kernel variants for" in logged
    assert "0 cached, 4 compiled" in logged
