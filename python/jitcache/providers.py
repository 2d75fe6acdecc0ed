"""Cache providers: prebuilt kernels shipped as pip packages ("cache wheels").

``jitcache pack --checkpoint DIR --arch sm_90 --out dist/`` builds a wheel holding the
verified bundles of every variant a checkpoint needs on those targets. The wheel declares an
entry point in the group ``jitcache.cache_providers``; calling it returns a mapping with the
provider's ``directory`` (``manifest.json`` and ``bundles/``) and its ``manifest``.

A :class:`jitcache.Runtime` asks the installed providers (this module's :func:`installed`)
after its local cache and before a remote one, unless told otherwise (``providers=``). The
library verifies every bundle it reads (digests, the facts of its key, the cubin's ELF and
embedded facts, the fleet key's signature when one is configured) and copies a hit into the
local cache; a provider that fails is a warning, never an error. Which kernels a provider
holds is decided by their keys alone: a cache wheel built by another jitcache, for another
compiler build or another record format simply misses.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .errors import InvalidArgumentError

__all__ = ["GROUP", "Provider", "installed"]

GROUP = "jitcache.cache_providers"

_logger = logging.getLogger("jitcache")


@dataclass(frozen=True)
class Provider:
    """An installed cache provider."""

    name: str  # the entry point's name (the cache wheel's package)
    distribution: str  # the distribution that declares it
    directory: str  # the provider directory handed to the library
    manifest: str  # its manifest.json


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=GROUP))


def _describe(point: metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    owner = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"cache provider {point.name!r} ({point.value}){owner}"


def _load(point: metadata.EntryPoint) -> Provider:
    target = point.load()
    found = target() if callable(target) else target
    if not isinstance(found, dict):
        raise TypeError(f"returned {type(found).__name__}, expected a dict with 'directory' and 'manifest'")
    directory = found.get("directory")
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise TypeError("'directory' is missing or not a path")
    manifest = found.get("manifest", Path(directory) / "manifest.json")
    if not isinstance(manifest, (str, os.PathLike)):
        raise TypeError("'manifest' is not a path")
    directory = os.fspath(directory)
    if ":" in directory:
        # The library takes a ':'-separated list, as PATH is.
        raise ValueError(f"its directory {directory!r} holds ':'")
    if Path(manifest).resolve().parent != Path(directory).resolve():
        raise ValueError(f"its manifest {os.fspath(manifest)!r} is not in its directory {directory!r}")
    dist = getattr(point, "dist", None)
    return Provider(
        name=point.name,
        distribution=dist.name if dist is not None else "",
        directory=directory,
        manifest=os.fspath(manifest),
    )


_installed: list[Provider] | None = None
_installed_lock = threading.Lock()


def installed(refresh: bool = False) -> list[Provider]:
    """The cache providers installed in this environment, in the order of their names.

    One that cannot be loaded (its package is broken, its entry point raises or returns
    something else than a provider) is skipped with a warning naming it; the library checks
    the rest when it reads them. The environment is scanned once per process (reading every
    distribution's metadata: about 25 ms in vLLM's environment of some 200 packages, 5 ms
    again); ``refresh=True`` scans it again, after a cache wheel was installed while this
    process runs.
    """
    global _installed
    with _installed_lock:
        if _installed is None or refresh:
            found: list[Provider] = []
            for point in sorted(_entry_points(), key=lambda p: (p.name, p.value)):
                try:
                    found.append(_load(point))
                except Exception as exc:  # a broken provider is a warning, never a failed start
                    _logger.warning("%s skipped: %s: %s", _describe(point), type(exc).__name__, exc)
            _installed = found
        return list(_installed)


def directories(providers: object) -> list[str]:
    """The provider directories a Runtime hands the library for its ``providers=`` argument:
    ``None`` (the default) means the installed ones, ``False`` none (JITCACHE_PROVIDERS still
    applies), and a list of paths or :class:`Provider` exactly those."""
    if providers is None:
        return [p.directory for p in installed()]
    if providers is False:
        return []
    if isinstance(providers, (str, os.PathLike, Provider)):
        providers = [providers]
    try:
        items = list(providers)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"providers: expected None, False or a list of directories, got {providers!r}"
        ) from None
    dirs: list[str] = []
    for item in items:
        try:
            path = item.directory if isinstance(item, Provider) else os.fspath(item)
        except TypeError:
            raise InvalidArgumentError(f"providers: {item!r} is not a directory") from None
        if not path:
            raise InvalidArgumentError("providers: an empty directory name")
        if ":" in path:
            raise InvalidArgumentError(f"providers: {path!r} holds ':', which separates the library's list")
        dirs.append(path)
    return dirs
