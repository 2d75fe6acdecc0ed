"""jitcache.metrics and `jitcache stats --format prometheus`, read back with prometheus_client's
own parser and registry: the names and values a Prometheus server would scrape, checked
against `jitcache stats --json` and Runtime.stats()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import jitcache
import jitcache.metrics as jm

from conftest import run_cli

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

TARGET = "sm_90"


def _leaves(doc: dict, prefix: str = "") -> dict[str, float]:
    """Every number of a JSON object by its '/' path ("hits/memory")."""
    out: dict[str, float] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_leaves(value, path + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[path] = float(value)
    return out


def _samples(registry: "prometheus_client.CollectorRegistry", name: str) -> dict[tuple, float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name
    }


# ---- the CLI ------------------------------------------------------------------------------


def test_cli_prometheus_output_parses_and_matches_stats_json(cli: Path, tmp_path: Path, glm5_mini: Path) -> None:
    cache = tmp_path / "cache"
    warm = ["--cache-dir", str(cache), "warm", "--checkpoint", str(glm5_mini), "--arch", TARGET]
    run_cli(cli, *warm)
    run_cli(cli, *warm)  # the second time from the disk
    doc = json.loads(run_cli(cli, "--cache-dir", str(cache), "stats", "--json").stdout)
    text = run_cli(cli, "--cache-dir", str(cache), "stats", "--format", "prometheus").stdout

    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    where = ("cache_dir", str(cache))
    scope = ("scope", "cache")

    def counter(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted([where, scope, *labels.items()])))]

    assert counter("jitcache_hits_total", tier="memory") == doc["hits"]["memory"]
    assert counter("jitcache_hits_total", tier="disk") == doc["hits"]["disk"] == 4
    assert counter("jitcache_hits_total", tier="remote") == doc["remote"]["hits"]
    assert counter("jitcache_misses_total") == doc["misses"] == 4
    assert counter("jitcache_compiles_total") == doc["compiles"] == 4
    assert counter("jitcache_compile_failures_total") == doc["compile_failures"]
    assert counter("jitcache_compile_seconds_spent_total") == pytest.approx(doc["compile_ms"]["spent"] / 1000)
    assert counter("jitcache_compile_seconds_saved_total") == pytest.approx(doc["compile_ms"]["saved"] / 1000)
    assert counter("jitcache_compile_seconds_spent_total") > 0
    assert counter("jitcache_quarantined_total") == doc["quarantined"]
    assert counter("jitcache_evicted_total") == doc["evicted"]
    assert counter("jitcache_remote_errors_total") == doc["remote"]["errors"]
    for gauge in ("entries", "bytes", "max_bytes"):
        assert samples[(f"jitcache_cache_{gauge}", (where,))] == doc[gauge]
        assert families[f"jitcache_cache_{gauge}"].type == "gauge"

    # Every counter of the JSON is one counter sample, and nothing else is.
    counters = {k: v for k, v in _leaves(doc).items() if k not in ("entries", "bytes", "max_bytes")}
    counter_samples = [
        (f.name, s) for f in families.values() if f.type == "counter" for s in f.samples
    ]
    assert len(counter_samples) == len(counters)
    assert sorted(s.value for _, s in counter_samples) == pytest.approx(
        sorted(v / 1000 if k.startswith("compile_ms/") else v for k, v in counters.items())
    )
    for name, s in counter_samples:
        assert s.name == name + "_total" and s.labels["scope"] == "cache" and s.labels["cache_dir"] == str(cache)
        assert families[name].documentation


def test_cli_refuses_an_unknown_format_naming_the_choices(cli: Path, tmp_path: Path) -> None:
    done = run_cli(cli, "--cache-dir", str(tmp_path / "c"), "stats", "--format", "yaml", check=False)
    assert done.returncode == 2
    assert "text, json or prometheus" in done.stderr and done.stdout == ""


# ---- the collector ------------------------------------------------------------------------


def test_collector_reports_the_runtimes_session_and_the_caches_size(tmp_path: Path, glm5_mini: Path) -> None:
    cache = tmp_path / "cache"
    registry = prometheus_client.CollectorRegistry()
    collector = jm.register(registry)
    assert jm.register(registry) is collector, "registering again returns the same collector"
    assert isinstance(collector, jm.Collector)
    labels = {"cache_dir": str(cache), "scope": "process"}
    value = registry.get_sample_value

    with jitcache.Runtime(cache_dir=cache, device="none") as rt:
        assert value("jitcache_compiles_total", labels) == 0
        model = rt.prepare(glm5_mini, target=TARGET)
        assert model.stats.compiled == 4
        model.close()
        stats = rt.stats()
        assert stats.cache_dir == str(cache) and stats.mode == "read-write"
        assert stats.session["compiles"] == 4 and stats.session["misses"] == 4
        assert value("jitcache_compiles_total", labels) == stats.session["compiles"]
        assert value("jitcache_misses_total", labels) == stats.session["misses"]
        assert value("jitcache_compile_seconds_spent_total", labels) == pytest.approx(
            stats.session["compile_ms"]["spent"] / 1000
        )
        assert value("jitcache_cache_entries", {"cache_dir": str(cache)}) == stats.entries == 4
        assert value("jitcache_cache_bytes", {"cache_dir": str(cache)}) == stats.bytes > 0
        rt.prepare(glm5_mini, target=TARGET).close()  # this runtime's memory tier
        assert value("jitcache_hits_total", {**labels, "tier": "memory"}) == 4
        assert rt.stats().session["hits"]["memory"] == 4

    # Closed: its counters stay (they never go down), the size goes with the last runtime.
    assert value("jitcache_compiles_total", labels) == 4
    assert value("jitcache_hits_total", {**labels, "tier": "memory"}) == 4
    assert value("jitcache_cache_entries", {"cache_dir": str(cache)}) is None

    with jitcache.Runtime(cache_dir=cache, device="none") as second:
        assert second.stats().session["compiles"] == 0, "a runtime's session is its own"
        second.prepare(glm5_mini, target=TARGET).close()
        assert second.stats().session["hits"]["disk"] == 4
        # The process's figures: both runtimes, the closed one's included.
        assert value("jitcache_hits_total", {**labels, "tier": "disk"}) == 4
        assert value("jitcache_compiles_total", labels) == 4
        assert value("jitcache_misses_total", labels) == 4
        assert value("jitcache_cache_entries", {"cache_dir": str(cache)}) == 4

    assert jm.unregister(registry) is True
    assert jm.unregister(registry) is False
    assert value("jitcache_compiles_total", labels) is None


def test_two_caches_are_two_series_and_memory_only_has_no_size(tmp_path: Path, glm5_mini: Path) -> None:
    registry = prometheus_client.CollectorRegistry()
    jm.register(registry)
    one, two, shared = tmp_path / "one", tmp_path / "two", tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # world-writable: refused, the runtime runs memory-only
    with jitcache.Runtime(cache_dir=one, device="none") as a, jitcache.Runtime(
        cache_dir=two, device="none"
    ) as b, jitcache.Runtime(cache_dir=shared, device="none", require_cache=False) as c:
        a.prepare(glm5_mini, target=TARGET).close()
        b.prepare(glm5_mini, target=TARGET, format="b12x-368", rope=None).close()
        c.prepare(glm5_mini, target=TARGET).close()
        assert c.stats().mode == "memory-only" and c.stats().entries is None
        compiles = _samples(registry, "jitcache_compiles_total")
        for where in (one, two, shared):
            assert compiles[(("cache_dir", str(where)), ("scope", "process"))] == 4
        entries = _samples(registry, "jitcache_cache_entries")
        assert set(entries) == {(("cache_dir", str(one)),), (("cache_dir", str(two)),)}


def test_runtime_stats_of_a_closed_runtime_is_refused(tmp_path: Path) -> None:
    rt = jitcache.Runtime(cache_dir=tmp_path / "c", device="none")
    rt.close()
    with pytest.raises(jitcache.InvalidArgumentError, match="closed"):
        rt.stats()


WITHOUT_PROMETHEUS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "prometheus_client" or name.startswith("prometheus_client."):
            raise ImportError("blocked for the test: " + name)
        return None
sys.meta_path.insert(0, Block())
import jitcache, jitcache.metrics
try:
    jitcache.metrics.register()
except ImportError as exc:
    print("IMPORT-ERROR", isinstance(exc, jitcache.Error), exc)
"""


def test_prometheus_client_is_optional(python_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PROMETHEUS], env=python_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "IMPORT-ERROR True" in done.stdout
    assert "pip install prometheus_client" in done.stdout
