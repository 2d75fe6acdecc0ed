"""Runtime, an open cache directory and device, which prepares checkpoints into Models
(model.py), and the compile API for kernels from outside, over the C ABI."""

from __future__ import annotations

import ctypes
import json
import math
import numbers
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from ctypes import byref, c_char_p, c_int, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import _lib, _log
from . import providers as _providers
from ._types import HandleOwner, PathArg
from .errors import InvalidArgumentError
from .formats import record_format, record_latent_scale
from .model import (
    KernelInfo,
    LayerInfo,
    Model,
    PrepareStats,
    Provenance,
    ResolvedScales,
    _fit,
    _optional_text,
    resolve_scales,
)

__all__ = [
    "Runtime",
    "Model",
    "LayerInfo",
    "PrepareStats",
    "KernelInfo",
    "Provenance",
    "DeviceInfo",
    "CacheInfo",
    "RuntimeStats",
    "ResolvedScales",
    "resolve_scales",
    "CompiledKernel",
    "KernelLookup",
    "VariantCoverage",
]


_lib_ = _lib.lib
_ROPES = {"bf16": _lib.ROPE_BF16, "fp8": _lib.ROPE_FP8}
_DEVICES = {"auto": _lib.DEVICE_AUTO, "none": _lib.DEVICE_NONE}


def _rope_enum(rope: str) -> int:
    try:
        return _ROPES[rope]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"rope: expected 'bf16' or 'fp8', got {rope!r}") from None


def _format_name(
    format: Optional[str], rope: Optional[str], latent_scale: Optional[str] = None
) -> tuple[str, Optional[str]]:
    """host.record_format's answer and the latent scale the call means (a record name such as
    "b12x-368-per-token" fixes it), ValueError as the library's InvalidArgumentError."""
    if rope is not None:
        _rope_enum(rope)
    if format is not None and not isinstance(format, str):
        raise InvalidArgumentError(f"format: expected a format name, got {type(format).__name__}")
    try:
        return record_format(format, rope), record_latent_scale(format, latent_scale)
    except ValueError as error:
        raise InvalidArgumentError(str(error)) from None


def _latent_enum(latent_scale: Optional[str]) -> int:
    if latent_scale is None or latent_scale == "per-layer":
        return _lib.LATENT_PER_LAYER
    if latent_scale == "per-token":
        return _lib.LATENT_PER_TOKEN
    raise InvalidArgumentError(
        f"latent_scale: expected 'per-token' or 'per-layer' (each layer's scale picks identity or "
        f"dynamic), got {latent_scale!r}"
    )



def _text(name: str, value: object) -> bytes:
    """A str argument as the NUL-terminated UTF-8 the C ABI takes. A NUL inside would cut
    the string short there without a word from the library, so it is refused here."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgumentError(f"{name}: {value!r} contains a NUL character")
    return value.encode("utf-8")


def _blob(name: str, value: object) -> bytes:
    """Text (str, encoded as UTF-8) or raw bytes (NVVM bitcode) passed with its size."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name}: expected str or bytes, got {type(value).__name__}")


def _kind_enum(kind: object) -> int:
    try:
        return _lib.SOURCE_KINDS[kind]  # type: ignore[index]
    except (KeyError, TypeError):
        allowed = ", ".join(repr(k) for k in _lib.SOURCE_KINDS)
        raise InvalidArgumentError(f"kind: expected one of {allowed}, got {kind!r}") from None


def _string_list(name: str, values: object) -> list[str]:
    """A sequence of str; a bare str is refused (it would be taken one character at a time)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name}: expected a sequence of str, got {type(values).__name__}")
    for i, item in enumerate(values):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}]: expected a str, got {type(item).__name__}")
    return list(values)


def _spec_array(spec: object) -> tuple[Any, int]:
    """The spec facts as a jitcache_fact array (sorted by name) and its length."""
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec: expected a mapping of fact name to str, got {type(spec).__name__}")
    facts = []
    for name, value in spec.items():
        key = _text("spec fact name", name)
        if not isinstance(value, str):
            raise TypeError(f"spec[{name!r}]: expected a str, got {type(value).__name__}")
        facts.append((key, _text(f"spec[{name!r}]", value)))
    facts.sort()
    array = (_lib.Fact * len(facts))(*(_lib.Fact(k, v) for k, v in facts))
    return array, len(facts)


def _verify_fraction(value: object) -> float:
    """Runtime's verify_spec as the C field: -1 (None: the environment decides) or 0..1."""
    if value is None:
        return -1.0
    if not isinstance(value, numbers.Real):  # a str such as "0.5" is refused, not parsed
        raise TypeError(f"verify_spec: expected a number from 0 to 1 or None, got {type(value).__name__}")
    fraction = float(value)  # True and False are 1 and 0: every hit verified, or none
    if math.isnan(fraction) or not 0.0 <= fraction <= 1.0:
        raise InvalidArgumentError(f"verify_spec: expected a fraction from 0 to 1, got {value!r}")
    return fraction


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel from outside, compiled or found in the cache: its cubin and what jitcache knows
    of it. ``from_cache``: served by the cache (memory, disk or remote), not compiled by this
    call; ``verified``: this call compared the request's source with the spec record and they
    agree; ``ms``: the call's wall time. Resource figures are -1 when ptxas did not report them."""

    cubin: bytes = field(repr=False)
    family: str
    kind: str  # "cuda" | "nvvm" | "ptx"
    entry: str
    target: str
    key: str  # 32 hex digits
    from_cache: bool
    from_remote: bool
    verified: bool
    ms: float
    registers: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    log: str = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any], cubin: bytes) -> "CompiledKernel":
        res = doc.get("resources") or {}
        return cls(
            cubin=cubin,
            family=doc["family"],
            kind=doc["kind"],
            entry=doc["entry"],
            target=doc["target"],
            key=doc["key"],
            from_cache=bool(doc["from_cache"]),
            from_remote=bool(doc.get("from_remote", False)),
            verified=bool(doc.get("verified", False)),
            ms=float(doc.get("ms", 0.0)),
            registers=int(res.get("registers", -1)),
            stack_frame_bytes=int(res.get("stack_frame_bytes", -1)),
            spill_store_bytes=int(res.get("spill_store_bytes", -1)),
            spill_load_bytes=int(res.get("spill_load_bytes", -1)),
            log=doc.get("log") or "",
        )


@dataclass(frozen=True)
class KernelLookup:
    """What :meth:`Runtime.lookup` found for a spec: "hit" (``kernel`` is set), "miss", or
    "verify": an entry exists but was chosen for shadow verification, so generate the source
    and call :meth:`Runtime.compile`, which checks it against the recorded one."""

    outcome: str  # "hit" | "miss" | "verify"
    kernel: Optional[CompiledKernel] = None


def _take_kernel(handle: int) -> CompiledKernel:
    """Copies a jitcache_kernel out (cubin bytes, described fields) and releases it."""
    try:
        data = c_void_p()
        size = c_size_t()
        _lib.check(_lib_.jitcache_kernel_cubin(handle, byref(data), byref(size)))
        cubin = ctypes.string_at(data.value, size.value) if data.value and size.value else b""
        out = c_void_p()
        _lib.check(_lib_.jitcache_kernel_describe(handle, byref(out)))
        doc = json.loads(_lib.take_string(out))
    finally:
        _lib_.jitcache_kernel_release(handle)
    return CompiledKernel.from_json(doc, cubin)


@dataclass(frozen=True)
class VariantCoverage:
    """One kernel variant a model needs and the cache tier that holds it
    (:meth:`Runtime.coverage`): "memory", "local" (the cache directory), "provider" or
    "remote"; None when no tier does (prepare would compile it)."""

    label: str  # "writer/dynamic/b12x-432/sm_100a"
    kernel: str
    latent_scale: str
    format: str
    target: str
    key: str
    tier: Optional[str]
    tier_name: Optional[str]  # the tier's own name ("disk", "redis", ...)
    layers: tuple[int, ...]

    @property
    def covered(self) -> bool:
        return self.tier is not None

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> "VariantCoverage":
        return cls(
            label=str(doc["label"]),
            kernel=str(doc["kernel"]),
            latent_scale=str(doc["latent_scale"]),
            format=str(doc["format"]),
            target=str(doc["target"]),
            key=str(doc["key"]),
            tier=None if doc["tier"] is None else str(doc["tier"]),
            tier_name=None if doc["tier_name"] is None else str(doc["tier_name"]),
            layers=tuple(int(x) for x in doc["layers"]),  # type: ignore[union-attr]
        )


@dataclass(frozen=True)
class DeviceInfo:
    """The device a runtime found when it opened."""

    available: bool
    reason: str
    name: str
    target: str


@dataclass(frozen=True)
class CacheInfo:
    """How a runtime's cache is backed: "read-write", "read-only" or "memory-only"."""

    mode: str
    dir: str
    reason: str


@dataclass(frozen=True)
class RuntimeStats:
    """A runtime's cache figures (:meth:`Runtime.stats`, docs/metrics.md).

    ``session``: what the runtime's cache did since the runtime opened, in this process only,
    under the names of ``jitcache stats --json`` (``{"hits": {"memory", "disk"}, "misses",
    "compiles", "compile_ms": {"spent", "saved"}, ...}``; time in milliseconds).
    ``entries``, ``bytes``, ``max_bytes``: the cache directory's now (every process's
    entries); None when there is none (memory-only) or its index could not be read, which
    ``cache_error`` then says."""

    cache_dir: str
    mode: str
    session: Mapping[str, Any]
    entries: Optional[int]
    bytes: Optional[int]
    max_bytes: Optional[int]
    cache_error: str = ""


def _stats_document(handle: int) -> dict[str, Any]:
    """jitcache_runtime_stats's document (the session's counters, the size, the metrics)."""
    out = c_void_p()
    _lib.check(_lib_.jitcache_runtime_stats(handle, byref(out)))
    return json.loads(_lib.take_string(out))


# ---- the runtimes this process opened, for jitcache.metrics ----------------------------
# Open runtimes are held weakly: tracking one never keeps it alive. When a runtime closes
# (close(), garbage collection, interpreter exit), its counters' last figures are added to
# _retired, so that the counters jitcache.metrics exports never go down while the process
# lives (a Prometheus counter that drops reads as a restart). A forked child starts with
# neither: its counters are its own. One lock orders closes and scrapes, so that a scrape
# sees a runtime either open or retired, never both or neither; reentrant, because the
# garbage collector may close a runtime on a thread that holds it.
_SampleKey = tuple[str, tuple[tuple[str, str], ...]]
_open_runtimes: "weakref.WeakSet[Runtime]" = weakref.WeakSet()
_retired: dict[_SampleKey, tuple[str, float]] = {}
_tracking = threading.RLock()


def _sample_key(name: str, labels: Mapping[str, str]) -> _SampleKey:
    return name, tuple(sorted(labels.items()))


def _retire(handle: int) -> None:
    """Adds the runtime's counters, as they are now, to _retired (best effort: a runtime of
    the parent in a forked child, or one the interpreter closes at exit, may have none)."""
    try:
        doc = _stats_document(handle)
    except Exception:  # noqa: BLE001 - closing must not fail for a figure
        return
    for family in doc.get("metrics", ()):
        if family.get("type") != "counter":
            continue
        for sample in family["samples"]:
            key = _sample_key(family["name"], sample["labels"])
            help_text, value = _retired.get(key, (family["help"], 0.0))
            _retired[key] = (help_text, value + float(sample["value"]))


def _close_handle(handle: int, retired: list[bool]) -> None:
    """The finalizer: keeps the counters (unless close() already did), then closes."""
    if not retired[0]:
        with _tracking:
            _retire(handle)
    _lib_.jitcache_runtime_close(handle)


def _scrape() -> tuple[list[dict[str, Any]], dict[_SampleKey, tuple[str, float]]]:
    """The documents of the open runtimes and the retired counters, at one instant (for
    jitcache.metrics). A runtime closed or unusable meanwhile is left out."""
    docs = []
    with _tracking:
        for runtime in list(_open_runtimes):
            handle = runtime._handle
            if handle is None:
                continue
            try:
                docs.append(_stats_document(handle))
            except Exception:  # noqa: BLE001 - one runtime's failure must not fail a scrape
                continue
        return docs, dict(_retired)


def _forget_in_child() -> None:
    global _tracking
    _tracking = threading.RLock()  # a thread of the parent may have held it at fork()
    _open_runtimes.clear()
    _retired.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _prepare_options(
    checkpoint: PathArg,
    format: str | None,
    rope: str | None,
    latent_scale: str | None,
    target: str | None,
    scales_override: PathArg | None,
    revision: str | None,
) -> tuple[str, "_lib.PrepareOptions"]:
    """The record format's name and the C options of prepare() and coverage(), checked."""
    name, latent = _format_name(format, rope, latent_scale)
    options = _lib.PrepareOptions()
    _lib_.jitcache_prepare_options_init(byref(options))
    options.checkpoint = _lib.encode_path("checkpoint", checkpoint)
    options.format = _lib.FORMATS[name]
    options.latent_scale = _latent_enum(latent)
    options.target = _optional_text("target", target)
    options.scales_override = _lib.encode_path("scales_override", scales_override)
    options.revision = _optional_text("revision", revision)
    return name, options


class Runtime(HandleOwner):
    """An open cache directory (and device): prepares checkpoints into :class:`Model` objects.

    ``require_cache``: None follows JITCACHE_REQUIRE_CACHE; True makes an unusable cache
    directory an error; False runs memory-only with one warning. It is about the local
    directory only: the remote is never required.

    ``remote``: a cache shared by a fleet, ``redis://[user[:password]@]host[:port][/db]``;
    None or "" follows JITCACHE_REMOTE (unset: no remote). A local miss is looked up there
    (a verified hit is also stored in the cache directory), one node of the fleet compiles
    each kernel while the others wait for it, and what this node compiles is uploaded. It
    is used only with a fleet key: JITCACHE_REMOTE_KEY_FILE names a file of at least 32
    bytes, owned by this user and readable by no one else, with which every remote entry
    is signed and checked; without one the remote is not used (one warning). A remote that
    is down or silent costs its timeout once, then nothing while the local cache goes on
    alone. A remote configuration that cannot be used (a malformed URL, an unusable key
    file) is one warning and no remote, whatever ``require_cache`` says.

    ``verify_spec``: the fraction (0 to 1) of :meth:`lookup` hits answered "verify" instead,
    so that the caller generates the source and :meth:`compile` checks the family's spec
    still determines it; None follows JITCACHE_VERIFY_SPEC (a boolean or a fraction; unset: 0).

    ``providers``: cache providers (prebuilt kernels, :mod:`jitcache.providers`) asked after
    the local cache and before the remote. None (the default): the cache wheels installed in
    this environment; False: none; a list of directories: exactly those. The directories in
    JITCACHE_PROVIDERS are asked first in every case. A hit is verified and copied into the
    local cache; a provider that is missing or fails a check is a warning, never an error.
    ``no_compile``: True makes a kernel missing from every cache tier an
    :class:`UnavailableError` naming the variant (kernel, format, latent scale, target, key)
    and every tier it was looked up in, instead of a compile (nothing is compiled;
    :meth:`prepare` names every missing variant); None follows JITCACHE_NO_COMPILE (unset:
    off). :meth:`coverage` says beforehand which variants are missing.

    Threads and processes: any number of threads may call one runtime, and :meth:`close`
    may come from another one meanwhile. A runtime belongs to the process that opened it: in
    a child made by ``os.fork()`` (multiprocessing's "fork" start method, vLLM's workers)
    its calls raise InvalidArgumentError, and the child opens its own ``Runtime``, which
    works, compiles included, even when the parent forked while a thread was compiling.
    """

    def __init__(
        self,
        cache_dir: PathArg | None = None,
        jobs: int = 0,
        device: str = "auto",
        device_ordinal: int = 0,
        max_bytes: int = 0,
        require_cache: bool | None = None,
        remote: str | None = None,
        verify_spec: float | None = None,
        providers: Any = None,
        no_compile: bool | None = None,
    ) -> None:
        self._handle: int | None = None
        provider_dirs = _providers.directories(providers)
        options = _lib.RuntimeOptions()
        _lib_.jitcache_runtime_options_init(byref(options))
        options.cache_dir = _lib.encode_path("cache_dir", cache_dir)
        options.jobs = _fit("jobs", jobs, 32, False)
        if device not in _DEVICES:
            raise InvalidArgumentError(f"device: expected 'auto' or 'none', got {device!r}")
        options.device = _DEVICES[device]
        options.device_ordinal = self._device_ordinal = _fit("device_ordinal", device_ordinal, 32, True)
        options.cache_max_bytes = _fit("max_bytes", max_bytes, 64, False)
        if require_cache is None:
            options.cache_requirement = _lib.CACHE_FROM_ENVIRONMENT
        else:
            options.cache_requirement = (
                _lib.CACHE_REQUIRED if require_cache else _lib.CACHE_OPTIONAL
            )
        options.remote = _optional_text("remote", remote)
        options.verify_spec = _verify_fraction(verify_spec)
        self._providers = tuple(provider_dirs)
        options.providers = ":".join(provider_dirs).encode() if provider_dirs else None
        if no_compile is not None and not isinstance(no_compile, bool):
            raise TypeError(f"no_compile: expected True, False or None, got {type(no_compile).__name__}")
        options.no_compile = -1 if no_compile is None else int(no_compile)
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_runtime_open(byref(options), byref(out)))
        handle = out.value
        self._handle = handle
        self._retired = [False]  # whether close() kept the counters already
        self._finalizer = weakref.finalize(self, _close_handle, handle, self._retired)
        try:
            dev = _lib.DeviceStatus()
            _lib.check(_lib_.jitcache_runtime_device(handle, byref(dev)))
            self._device = DeviceInfo(
                available=bool(dev.available),
                reason=_lib.decode(dev.reason),
                name=_lib.decode(dev.name),
                target=_lib.decode(dev.target),
            )
            cache = _lib.CacheStatus()
            _lib.check(_lib_.jitcache_runtime_cache_status(handle, byref(cache)))
            self._cache = CacheInfo(
                mode=_lib.CACHE_MODES.get(cache.mode, str(cache.mode)),
                dir=_lib.decode(cache.dir),
                reason=_lib.decode(cache.reason),
            )
            self._cache_dir = _lib.decode(_lib_.jitcache_runtime_cache_dir(handle))
        except BaseException:
            self.close()
            raise
        with _tracking:
            _open_runtimes.add(self)

    def close(self) -> None:
        """Closes the runtime (idempotent). Calls other threads are making (a prepare that
        compiles) run to their end first; a call that starts afterwards raises
        InvalidArgumentError ("runtime closed"). Models it prepared stay usable."""
        handle = self._handle
        if handle is not None:
            # The counters are kept before the close, which may wait for calls in flight (a
            # prepare compiling): what those count after this instant is not exported.
            with _tracking:
                self._handle = None
                if self in _open_runtimes:
                    _retire(handle)
                    _open_runtimes.discard(self)
                self._retired[0] = True
            self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else self._cache.mode
        return f"<jitcache.Runtime {self._cache_dir!r} {state}>"

    def _live(self) -> int:
        handle = self._handle
        if handle is None:
            raise InvalidArgumentError("jitcache: runtime closed (Runtime.close() was called)")
        return handle

    @property
    def cache_dir(self) -> str:
        """The cache directory in use (memory-only: the one that was refused, or "")."""
        self._live()
        return self._cache_dir

    @property
    def providers(self) -> tuple[str, ...]:
        """The provider directories this runtime was given (JITCACHE_PROVIDERS not included)."""
        return self._providers

    @property
    def device(self) -> DeviceInfo:
        self._live()
        return self._device

    @property
    def cache(self) -> CacheInfo:
        self._live()
        return self._cache

    def stats(self) -> RuntimeStats:
        """What this runtime's cache did since it opened (this process only) and the cache
        directory's size now. Reads the index once; compiles nothing."""
        doc = _stats_document(self._live())
        cache = doc.get("cache") or {}
        return RuntimeStats(
            cache_dir=doc["cache_dir"],
            mode=doc["mode"],
            session=doc["session"],
            entries=cache.get("entries"),
            bytes=cache.get("bytes"),
            max_bytes=cache.get("max_bytes"),
            cache_error=doc.get("cache_error", ""),
        )

    def prepare(
        self,
        checkpoint: PathArg,
        rope: str | None = None,
        target: str | None = None,
        scales_override: PathArg | None = None,
        revision: str | None = None,
        *,
        format: str | None = None,
        latent_scale: str | None = None,
    ) -> Model:
        """Resolves the scales, gets (compiling the misses) and binds every kernel variant.

        ``format``: the record the engine reads (jitcache.host.FORMATS; ``rope`` "bf16" /
        "fp8" is the older spelling of the first two; default b12x-432), or a record name
        (jitcache.formats.RECORDS): "b12x-368-per-token" is b12x-368 with
        ``latent_scale="per-token"``, and refuses another ``latent_scale``.
        ``latent_scale="per-token"``: every layer keeps each token's own scale in its record
        (b12x-368; b12x-304 has nothing else) and the checkpoint's scales are not applied;
        None: each layer's scale picks its kernel.
        ``target``: "sm_90", "sm_100a", "sm_120f", ...; with a GPU, one whose cubin runs
        on it (else InvalidArgumentError). None: the most specific target for the GPU
        that the cache holds, else its arch-specific one (docs/targets.md)."""
        handle = self._live()
        name, options = _prepare_options(checkpoint, format, rope, latent_scale, target, scales_override, revision)
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_prepare_with(handle, byref(options), byref(out)))
        return Model(out.value, os.fsdecode(checkpoint), name, self._device_ordinal)

    def coverage(
        self,
        checkpoint: PathArg,
        target: str | None = None,
        *,
        format: str | None = None,
        rope: str | None = None,
        latent_scale: str | None = None,
        scales_override: PathArg | None = None,
        revision: str | None = None,
    ) -> list[VariantCoverage]:
        """Which cache tier holds each kernel variant :meth:`prepare` would need for these
        arguments, without preparing: nothing is compiled, loaded, counted or copied between
        tiers. Each :class:`VariantCoverage` names its tier ("memory", "local", "provider",
        "remote"), or None when no tier holds it."""
        handle = self._live()
        _, options = _prepare_options(checkpoint, format, rope, latent_scale, target, scales_override, revision)
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_runtime_coverage(handle, byref(options), byref(out)))
        doc = json.loads(_lib.take_string(out))
        return [VariantCoverage.from_json(v) for v in doc["variants"]]

    # ---- kernels from outside: a family's source, compiled and cached by its spec ----
    def declare_family(
        self, family: str, kind: str, facts: Mapping[str, Optional[Sequence[str]]]
    ) -> None:
        """Declares a kernel family: the source kind its requests carry and its spec facts,
        each with its allowed values (None or empty: any non-empty string). The spec must
        determine the source: every input that changes the generated code is a fact.
        Declaring a family again with the same schema is fine; with another, an error."""
        handle = self._live()
        _text("family", family)
        _kind_enum(kind)
        if not isinstance(facts, Mapping):
            raise TypeError(f"facts: expected a mapping of fact name to allowed values, got {type(facts).__name__}")
        domains: dict[str, list[str]] = {}
        for name, allowed in facts.items():
            if not isinstance(name, str):
                raise TypeError(f"facts: a fact name must be a str, got {type(name).__name__}")
            if name in domains:  # a mapping whose items() repeat a name: neither one wins
                raise InvalidArgumentError(f"facts: fact {name!r} is given twice")
            domains[name] = [] if allowed is None else _string_list(f"facts[{name!r}]", allowed)
        schema = json.dumps({"family": family, "kind": kind, "facts": domains})
        _log.sync()
        _lib.check(_lib_.jitcache_declare_family(handle, schema.encode("utf-8")))

    def compile(
        self,
        *,
        family: str,
        spec: Mapping[str, str],
        kind: str,
        source: Union[str, bytes],
        entry: str,
        target: str,
        headers: Optional[Mapping[str, str]] = None,
        options: Sequence[str] = (),
    ) -> CompiledKernel:
        """The cubin of ``entry`` in ``source`` ("cuda" C++, "nvvm" IR text or bitcode, or
        "ptx") for an exact ``target`` ("sm_90", "sm_100a", ...), from the cache or compiled
        once (across threads and processes). ``spec`` must satisfy the family's declaration;
        when the cache already holds a kernel for the same spec built from another source,
        InvalidInputError (the spec is incomplete) and nothing is served."""
        handle = self._live()
        request = _lib.CompileRequest()
        _lib_.jitcache_compile_request_init(byref(request))
        keep: list[object] = []  # what the request points into, alive until the call returns
        request.family = _text("family", family)
        spec_array, request.num_spec = _spec_array(spec)
        keep.append(spec_array)
        request.spec = ctypes.cast(spec_array, ctypes.POINTER(_lib.Fact))
        request.kind = _kind_enum(kind)
        text = _blob("source", source)
        keep.append(text)
        request.text = text
        request.text_size = len(text)
        if headers is not None:
            if not isinstance(headers, Mapping):
                raise TypeError(f"headers: expected a mapping of include name to text, got {type(headers).__name__}")
            rows = [(_text("header name", name), _blob(f"headers[{name!r}]", body)) for name, body in headers.items()]
            header_array = (_lib.Header * len(rows))(*(_lib.Header(n, b, len(b)) for n, b in rows))
            keep.append(header_array)
            request.headers = ctypes.cast(header_array, ctypes.POINTER(_lib.Header))
            request.num_headers = len(rows)
        request.entry = _text("entry", entry)
        request.target = _text("target", target)
        encoded = [_text(f"options[{i}]", o) for i, o in enumerate(_string_list("options", options))]
        option_array = (c_char_p * len(encoded))(*encoded)
        keep.append(option_array)
        request.options = ctypes.cast(option_array, ctypes.POINTER(c_char_p))
        request.num_options = len(encoded)
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_compile(handle, byref(request), byref(out)))
        return _take_kernel(out.value)

    def lookup(self, family: str, spec: Mapping[str, str], target: str) -> KernelLookup:
        """The cached kernel for a family's spec and target, without the source (the spec
        record names it): outcome "hit" with the kernel, "miss", or "verify" (a hit chosen
        for shadow verification, see ``verify_spec``: generate the source and compile)."""
        handle = self._live()
        name = _text("family", family)
        spec_array, count = _spec_array(spec)
        where = _text("target", target)
        outcome = c_int()
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_lookup(handle, name, spec_array, count, where, byref(outcome), byref(out)))
        kernel = _take_kernel(out.value) if out.value else None
        state = _lib.LOOKUP_OUTCOMES.get(outcome.value, str(outcome.value))
        return KernelLookup(outcome=state, kernel=kernel)
