"""jitcache's figures for Prometheus: a ``prometheus_client`` collector (docs/metrics.md).

:func:`register` adds one collector to a ``prometheus_client`` registry (the default
``REGISTRY`` when none is given). Each scrape it reports, for every cache directory the
runtimes of this process use:

- the counters of those runtimes' sessions, summed per directory, with ``scope="process"``:
  hits by tier (``jitcache_hits_total{tier=...}``), misses, compiles, compile seconds spent
  and saved, quarantined and evicted entries, the remote tier's hits, misses, rejects,
  uploads, lease waits and errors; every counter of the library's table, named by it;
- the directory's size as gauges, ``jitcache_cache_entries``, ``jitcache_cache_bytes`` and
  ``jitcache_cache_max_bytes``, as an open runtime reads them from the index.

A runtime that was closed (or garbage collected) keeps counting with the figures it had when
it closed, so the counters never go down while the process lives; its directory's gauges
are reported while a runtime on it is open. ``jitcache stats --format prometheus`` prints
the same counters as the cache's index keeps them for every process (``scope="cache"``).

``prometheus_client`` is optional: importing this module does not need it; :func:`register`
raises :class:`MissingDependencyError` (an ImportError) without it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Optional

from . import runtime as _runtime
from .errors import Error

__all__ = ["MissingDependencyError", "Collector", "register", "unregister"]


class MissingDependencyError(Error, ImportError):
    """A feature needs a package that is not installed (the message names it)."""


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise MissingDependencyError(
            "jitcache.metrics needs prometheus_client, which is not installed: "
            "pip install prometheus_client"
        ) from None
    return prometheus_client


class Collector:
    """The collector :func:`register` adds: ``collect()`` yields one ``CounterMetricFamily``
    or ``GaugeMetricFamily`` per metric name, each sample labelled with its ``cache_dir``."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        docs, retired = _runtime._scrape()
        # name -> (type, help, {sorted labels: value}), in the order the library lists them.
        families: dict[str, tuple[str, str, dict[tuple[tuple[str, str], ...], float]]] = {}

        def family(name: str, kind: str, help_text: str) -> dict[tuple[tuple[str, str], ...], float]:
            if name not in families:
                families[name] = (kind, help_text, {})
            return families[name][2]

        for doc in docs:
            for fam in doc["metrics"]:
                samples = family(fam["name"], fam["type"], fam["help"])
                for sample in fam["samples"]:
                    labels = tuple(sorted(sample["labels"].items()))
                    value = float(sample["value"])
                    if fam["type"] == "counter":
                        samples[labels] = samples.get(labels, 0.0) + value
                    else:  # a gauge of the directory: every runtime on it reads the same index
                        samples[labels] = value
        for (name, labels), (help_text, value) in retired.items():
            samples = family(name, "counter", help_text)
            samples[labels] = samples.get(labels, 0.0) + value

        for name, (kind, help_text, samples) in families.items():
            if not samples:
                continue
            label_names = [label for label, _ in next(iter(samples))]
            metric_class = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            metric = metric_class(name, help_text, labels=label_names)
            for labels, value in sorted(samples.items()):
                metric.add_metric([v for _, v in labels], value)
            yield metric


_registered: "weakref.WeakKeyDictionary[Any, Collector]" = weakref.WeakKeyDictionary()
_registering = threading.Lock()


def register(registry: Optional[Any] = None) -> Collector:
    """Registers jitcache's collector in ``registry`` (a ``prometheus_client``
    ``CollectorRegistry``; None: ``prometheus_client.REGISTRY``) and returns it. Idempotent:
    registering in a registry that has jitcache's collector returns that one and adds
    nothing. The registry's own checks stand: another collector exposing ``jitcache_*``
    names makes it raise ValueError."""
    prometheus_client = _prometheus()
    if registry is None:
        registry = prometheus_client.REGISTRY
    with _registering:
        existing = _registered.get(registry)
        if existing is not None:
            return existing
        collector = Collector()
        registry.register(collector)
        _registered[registry] = collector
        return collector


def unregister(registry: Optional[Any] = None) -> bool:
    """Removes jitcache's collector from ``registry`` (None: the default); False when it
    had none."""
    prometheus_client = _prometheus()
    if registry is None:
        registry = prometheus_client.REGISTRY
    with _registering:
        collector = _registered.pop(registry, None)
        if collector is None:
            return False
        registry.unregister(collector)
        return True
