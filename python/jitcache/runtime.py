"""Runtime, Model and the scales resolver over the C ABI."""

from __future__ import annotations

import ctypes
import json
import math
import numbers
import operator
import os
import struct
import weakref
from collections.abc import Mapping, Sequence
from ctypes import byref, c_char_p, c_int, c_int32, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import _lib, _log
from .errors import InvalidArgumentError
from .formats import ROPE_ALIASES, record_format

__all__ = [
    "Runtime",
    "Model",
    "LayerInfo",
    "PrepareStats",
    "KernelInfo",
    "Provenance",
    "DeviceInfo",
    "CacheInfo",
    "ResolvedScales",
    "resolve_scales",
    "CompiledKernel",
    "KernelLookup",
]

PathArg = Union[str, "os.PathLike[str]"]

_lib_ = _lib.lib
_ROPES = {"bf16": _lib.ROPE_BF16, "fp8": _lib.ROPE_FP8}
_DEVICES = {"auto": _lib.DEVICE_AUTO, "none": _lib.DEVICE_NONE}


def _float32(value: float) -> float:
    """The float32 nearest to value, as a Python float (how the library holds a scale)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _rope_enum(rope: str) -> int:
    try:
        return _ROPES[rope]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"rope: expected 'bf16' or 'fp8', got {rope!r}") from None


def _format_name(format: Optional[str], rope: Optional[str]) -> str:
    """host.record_format's answer, its ValueError as the library's InvalidArgumentError."""
    if rope is not None:
        _rope_enum(rope)
    if format is not None and not isinstance(format, str):
        raise InvalidArgumentError(f"format: expected a format name, got {type(format).__name__}")
    try:
        return record_format(format, rope)
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


def _fit(name: str, value: int, bits: int, signed: bool) -> int:
    """Refuses an int the C field cannot hold (ctypes would silently wrap it)."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got bool")
    try:
        value = operator.index(value)  # int, numpy integers, ...
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name}: {value} is out of range ({lo} to {hi})")
    return value


def _optional_text(name: str, value: str | None) -> bytes | None:
    """A str argument or None as the C ABI takes it; a NUL inside would cut it short without
    a word from the library, so it raises ValueError naming the argument."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str or None, got {type(value).__name__}")
    if "\0" in value:
        # The value is not echoed: a remote URL may hold a password.
        raise ValueError(f"{name}: contains a NUL character (at index {value.index(chr(0))})")
    return value.encode("utf-8")


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
class LayerInfo:
    """One layer's binding: the scale its kernels apply, the variant and where the scale came from."""

    layer: int
    scale: float
    mode: str  # "identity" | "dynamic"
    source: str  # "override" | "checkpoint" | "identity-default" | "draft-identity"


@dataclass(frozen=True)
class PrepareStats:
    """What prepare() did: distinct variants needed, found cached (from_remote of them from
    the shared remote tier), compiled now, stored."""

    variants: int
    cached: int
    compiled: int
    stored: int
    wall_ms: float
    from_remote: int = 0


@dataclass(frozen=True)
class KernelInfo:
    """One kernel variant a prepared model holds."""

    kernel: str  # "writer" | "gather"
    latent_scale: str  # "identity" | "dynamic" | "per-token"
    rope: Optional[str]  # "bf16" | "fp8" for b12x-432 / b12x-368, else None
    target: str
    key: str
    entry: str
    registers: int
    cubin_bytes: int
    compiled_now: bool
    stored: bool
    loaded: bool
    ptx_fallback: bool
    from_remote: bool = False  # served by the shared remote tier (verified, then backfilled)
    format: str = "b12x-432"  # the record format (jitcache.host.FORMATS)


@dataclass(frozen=True)
class Provenance:
    """Where the scales came from, as `jitcache scales show --json` reports it."""

    source: str
    file: Optional[str]
    sha256: Optional[str]
    model_revision: Optional[str]
    checkpoint_revision: Optional[str]
    format: Optional[str]
    checkpoint_form: Optional[str]
    override_origin: Optional[str]
    shadowed_checkpoint_file: Optional[str]
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Provenance":
        details = doc.get("provenance")
        return cls(
            source=doc.get("source", ""),
            file=doc.get("file"),
            sha256=doc.get("sha256"),
            model_revision=doc.get("model_revision"),
            checkpoint_revision=doc.get("checkpoint_revision"),
            format=doc.get("format"),
            checkpoint_form=doc.get("checkpoint_form"),
            override_origin=doc.get("override_origin"),
            shadowed_checkpoint_file=doc.get("shadowed_checkpoint_file"),
            warnings=list(doc.get("warnings") or []),
            details=dict(details) if isinstance(details, dict) else {},
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
class ResolvedScales:
    """Every layer's scale for a checkpoint, and the provenance of the values."""

    checkpoint: str
    num_hidden_layers: int
    num_draft_layers: int
    latent_dim: int
    layers: list[LayerInfo]
    max_abs: list[Optional[float]]
    provenance: Provenance

    @property
    def scales(self) -> list[float]:
        return [layer.scale for layer in self.layers]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "ResolvedScales":
        rows = doc.get("layers") or []
        return cls(
            checkpoint=doc.get("checkpoint", ""),
            num_hidden_layers=int(doc.get("num_hidden_layers", 0)),
            num_draft_layers=int(doc.get("num_draft_layers", 0)),
            latent_dim=int(doc.get("latent_dim", 0)),
            layers=[
                LayerInfo(
                    layer=int(row["layer"]),
                    scale=_float32(float(row["scale"])),
                    mode=row["mode"],
                    source=row["source"],
                )
                for row in rows
            ],
            max_abs=[None if row.get("max_abs") is None else float(row["max_abs"]) for row in rows],
            provenance=Provenance.from_json(doc.get("provenance") or {}),
        )


def _layer_from_c(info: _lib.LayerInfoC) -> LayerInfo:
    return LayerInfo(
        layer=int(info.layer),
        scale=float(info.scale),
        mode=_lib.SCALE_MODES.get(info.mode, str(info.mode)),
        source=_lib.SCALE_SOURCES.get(info.source, str(info.source)),
    )


def resolve_scales(
    checkpoint: PathArg, scales_override: PathArg | None = None, revision: str | None = None
) -> ResolvedScales:
    """Resolves a checkpoint's per-layer scales without compiling anything.

    Same precedence, validation and logging as :meth:`Runtime.prepare`.
    """
    out = c_void_p()
    ckpt = _lib.encode_path("checkpoint", checkpoint)
    override = _lib.encode_path("scales_override", scales_override)
    rev = _optional_text("revision", revision)
    _log.sync()
    _lib.check(_lib_.jitcache_resolve_scales(ckpt, override, rev, byref(out)))
    return ResolvedScales.from_json(json.loads(_lib.take_string(out)))


def _released() -> InvalidArgumentError:
    return InvalidArgumentError("jitcache: model released (Model.close() was called)")


class Model:
    """A prepared checkpoint: every layer bound to its kernel variant and scale.

    Immutable and usable from any thread. Holds its kernels, so it outlives its Runtime.
    Release it with :meth:`close` (or a ``with`` block); garbage collection also does.
    """

    __slots__ = (
        "_handle",
        "_finalizer",
        "_layers",
        "_num_layers",
        "_target",
        "_format",
        "_checkpoint",
        "_description",
        "_device_ordinal",
        "__weakref__",
    )

    def __init__(self, handle: int, checkpoint: str, format: str, device_ordinal: int = 0) -> None:
        if not handle:
            raise InvalidArgumentError("jitcache: Model needs a model handle")
        self._handle: int | None = handle
        self._device_ordinal = device_ordinal
        self._finalizer = weakref.finalize(self, _lib_.jitcache_model_release, handle)
        self._checkpoint = checkpoint
        self._format = record_format(format)
        self._description: dict[str, Any] | None = None
        self._layers: tuple[LayerInfo, ...] | None = None
        try:
            count = c_int32()
            _lib.check(_lib_.jitcache_model_num_layers(handle, byref(count)))
            self._num_layers = int(count.value)
            self._target = _lib.decode(_lib_.jitcache_model_target(handle))
        except BaseException:
            self.close()
            raise

    def _all_layers(self, handle: int) -> tuple[LayerInfo, ...]:
        layers = self._layers
        if layers is None:  # built once, on first use (the model is immutable)
            info = _lib.LayerInfoC()
            built = []
            for i in range(self._num_layers):
                _lib.check(_lib_.jitcache_model_layer(handle, i, byref(info)))
                built.append(_layer_from_c(info))
            layers = self._layers = tuple(built)
        return layers

    # ---- lifetime ----
    def close(self) -> None:
        """Releases the model's handle (idempotent), after the calls other threads are making
        on it have returned; later use raises InvalidArgumentError."""
        self._handle = None
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> int:
        handle = self._handle
        if handle is None:
            raise _released()
        return handle

    def __repr__(self) -> str:
        state = "released" if self._handle is None else f"{self._num_layers} layers"
        return f"<jitcache.Model {self._checkpoint!r} {self._target} {self._format} {state}>"

    # ---- queries ----
    @property
    def checkpoint(self) -> str:
        return self._checkpoint

    @property
    def num_layers(self) -> int:
        self._live()
        return self._num_layers

    @property
    def layers(self) -> list[LayerInfo]:
        return list(self._all_layers(self._live()))

    def layer(self, index: int) -> LayerInfo:
        """One layer's binding; InvalidArgumentError (from the library) for a bad index."""
        handle = self._live()
        if isinstance(index, int) and 0 <= index < self._num_layers:
            return self._all_layers(handle)[index]
        index = _fit("layer", index, 32, True)
        if 0 <= index < self._num_layers:
            return self._all_layers(handle)[index]
        info = _lib.LayerInfoC()
        _lib.check(_lib_.jitcache_model_layer(handle, index, byref(info)))
        return _layer_from_c(info)  # not reached for a bad index: the library refuses it

    @property
    def target(self) -> str:
        self._live()
        return self._target

    @property
    def device_ordinal(self) -> int:
        """The CUDA device (its ordinal) the runtime loaded this model's kernels on."""
        return self._device_ordinal

    @property
    def format(self) -> str:
        """The record format the kernels write and read ("b12x-432", ..., "flashmla-352")."""
        self._live()
        return self._format

    @property
    def rope(self) -> Optional[str]:
        """The RoPE name of the format ("bf16" for b12x-432, "fp8" for b12x-368), else None."""
        self._live()
        return next((alias for alias, name in ROPE_ALIASES.items() if name == self._format), None)

    @property
    def latent_scale(self) -> str:
        """"per-token" when every layer keeps each token's own scale, else "per-layer"."""
        modes = {k.latent_scale for k in self.kernels}
        return "per-token" if modes == {"per-token"} else "per-layer"

    @property
    def record_bytes(self) -> int:
        self._live()
        return int(_lib_.jitcache_format_record_bytes(_lib.FORMATS[self._format]))

    def describe(self) -> dict[str, Any]:
        """Everything prepare decided, as the library's JSON document (a fresh dict)."""
        handle = self._live()
        if self._description is None:
            out = c_void_p()
            _lib.check(_lib_.jitcache_model_describe(handle, byref(out)))
            self._description = json.loads(_lib.take_string(out))
        return json.loads(json.dumps(self._description))

    @property
    def stats(self) -> PrepareStats:
        s = self.describe()["stats"]
        return PrepareStats(
            variants=int(s["variants"]),
            cached=int(s["cached"]),
            compiled=int(s["compiled"]),
            stored=int(s.get("stored", 0)),
            wall_ms=float(s["wall_ms"]),
            from_remote=int(s.get("from_remote", 0)),
        )

    @property
    def kernels(self) -> list[KernelInfo]:
        return [
            KernelInfo(
                kernel=k["kernel"],
                latent_scale=k["latent_scale"],
                rope=k.get("rope"),
                target=k["target"],
                key=k["key"],
                entry=k["entry"],
                registers=int(k["registers"]),
                cubin_bytes=int(k["cubin_bytes"]),
                compiled_now=bool(k["compiled_now"]),
                stored=bool(k["stored"]),
                loaded=bool(k["loaded"]),
                ptx_fallback=bool(k["ptx_fallback"]),
                from_remote=bool(k.get("from_remote", False)),
                format=k.get("format", self._format),
            )
            for k in self.describe()["kernels"]
        ]

    @property
    def scales(self) -> ResolvedScales:
        return ResolvedScales.from_json(self.describe()["scales"])

    @property
    def provenance(self) -> Provenance:
        return self.scales.provenance

    # ---- launches: direct C calls, no allocation beyond ctypes ----
    def launch_writer(self, layer: int, args: _lib.WriterLaunch, stream: int = 0) -> None:
        """Enqueues the layer's writer on a CUstream (0: the default stream)."""
        handle = self._handle
        if handle is None:
            raise _released()
        if not -0x80000000 <= layer <= 0x7FFFFFFF:  # ctypes would wrap it silently
            _fit("layer", layer, 32, True)
        status = _launch_writer(handle, layer, args, stream or None)
        if status:
            _lib.check(status)

    def launch_gather(self, layer: int, args: _lib.GatherLaunch, stream: int = 0) -> None:
        """Enqueues the layer's gather on a CUstream (0: the default stream)."""
        handle = self._handle
        if handle is None:
            raise _released()
        if not -0x80000000 <= layer <= 0x7FFFFFFF:  # ctypes would wrap it silently
            _fit("layer", layer, 32, True)
        status = _launch_gather(handle, layer, args, stream or None)
        if status:
            _lib.check(status)

    def host_write(self, layer: int, args: _lib.WriterLaunch) -> None:
        """The layer's writer on the CPU (host addresses in args)."""
        handle = self._handle
        if handle is None:
            raise _released()
        if not -0x80000000 <= layer <= 0x7FFFFFFF:  # ctypes would wrap it silently
            _fit("layer", layer, 32, True)
        status = _host_write(handle, layer, args)
        if status:
            _lib.check(status)

    def host_gather(self, layer: int, args: _lib.GatherLaunch) -> None:
        """The layer's gather on the CPU (host addresses in args)."""
        handle = self._handle
        if handle is None:
            raise _released()
        if not -0x80000000 <= layer <= 0x7FFFFFFF:  # ctypes would wrap it silently
            _fit("layer", layer, 32, True)
        status = _host_gather(handle, layer, args)
        if status:
            _lib.check(status)


_launch_writer = _lib_.jitcache_launch_writer
_launch_gather = _lib_.jitcache_launch_gather
_host_write = _lib_.jitcache_model_host_write
_host_gather = _lib_.jitcache_model_host_gather


class Runtime:
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
    ) -> None:
        self._handle: int | None = None
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
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_runtime_open(byref(options), byref(out)))
        handle = out.value
        self._handle = handle
        self._finalizer = weakref.finalize(self, _lib_.jitcache_runtime_close, handle)
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

    def close(self) -> None:
        """Closes the runtime (idempotent). Calls other threads are making (a prepare that
        compiles) run to their end first; a call that starts afterwards raises
        InvalidArgumentError ("runtime closed"). Models it prepared stay usable."""
        if self._handle is not None:
            self._handle = None
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
    def device(self) -> DeviceInfo:
        self._live()
        return self._device

    @property
    def cache(self) -> CacheInfo:
        self._live()
        return self._cache

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
        "fp8" is the older spelling of the first two; default b12x-432).
        ``latent_scale="per-token"``: every layer keeps each token's own scale in its record
        (b12x-368; b12x-304 has nothing else) and the checkpoint's scales are not applied;
        None: each layer's scale picks its kernel."""
        handle = self._live()
        name = _format_name(format, rope)
        options = _lib.PrepareOptions()
        _lib_.jitcache_prepare_options_init(byref(options))
        options.checkpoint = _lib.encode_path("checkpoint", checkpoint)
        options.format = _lib.FORMATS[name]
        options.latent_scale = _latent_enum(latent_scale)
        options.target = _optional_text("target", target)
        options.scales_override = _lib.encode_path("scales_override", scales_override)
        options.revision = _optional_text("revision", revision)
        out = c_void_p()
        _log.sync()
        _lib.check(_lib_.jitcache_prepare_with(handle, byref(options), byref(out)))
        return Model(out.value, os.fsdecode(checkpoint), name, self._device_ordinal)

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
