"""Model, a prepared checkpoint, and the values it answers with (layers, kernels, stats, the
resolved scales and their provenance), over the C ABI. Runtime (runtime.py) makes Models."""

from __future__ import annotations

import json
import operator
import struct
import weakref
from ctypes import byref, c_int32, c_void_p
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _lib, _log
from ._types import HandleOwner, PathArg
from .errors import InvalidArgumentError
from .formats import ROPE_ALIASES, record_format, record_name

__all__ = [
    "Model",
    "LayerInfo",
    "PrepareStats",
    "KernelInfo",
    "Provenance",
    "ResolvedScales",
    "resolve_scales",
]


_lib_ = _lib.lib

def _float32(value: float) -> float:
    """The float32 nearest to value, as a Python float (how the library holds a scale)."""
    return struct.unpack("f", struct.pack("f", value))[0]



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


@dataclass(frozen=True)
class LayerInfo:
    """One layer's binding: the scale its kernels apply, the variant and where the scale came from.

    In a per-token model (:attr:`Model.latent_scale`) the kernels take no outer scale:
    ``scale`` is 1.0, while ``mode`` and ``source`` still describe the checkpoint's scale."""

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
    from_provider: int = 0  # of `cached`, served by an installed cache provider (a cache wheel)


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
    from_provider: bool = False  # served by an installed cache provider (verified, then backfilled)
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


class Model(HandleOwner):
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
        """The record format the kernels write and read ("b12x-432", ..., "flashinfer-glm-416")."""
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
    def record(self) -> str:
        """The record name (jitcache.formats.RECORDS) of the format and latent scale: the
        format's name, or "b12x-368-per-token" for b12x-368 with per-token scales. The
        torch ops' ``format`` argument must give it."""
        return record_name(self.format, self.latent_scale)

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
            from_provider=int(s.get("from_provider", 0)),
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
                from_provider=bool(k.get("from_provider", False)),
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

    # ---- launches: direct C calls, the handle and layer checked first ----
    def launch_writer(self, layer: int, args: _lib.WriterLaunch, stream: int = 0) -> None:
        """Enqueues the layer's writer on a CUstream (0: the default stream)."""
        self._layer_call(_launch_writer, layer, args, stream or None)

    def launch_gather(self, layer: int, args: _lib.GatherLaunch, stream: int = 0) -> None:
        """Enqueues the layer's gather on a CUstream (0: the default stream)."""
        self._layer_call(_launch_gather, layer, args, stream or None)

    def host_write(self, layer: int, args: _lib.WriterLaunch) -> None:
        """The layer's writer on the CPU (host addresses in args)."""
        self._layer_call(_host_write, layer, args)

    def host_gather(self, layer: int, args: _lib.GatherLaunch) -> None:
        """The layer's gather on the CPU (host addresses in args)."""
        self._layer_call(_host_gather, layer, args)

    def _layer_call(self, call: Any, layer: int, *args: object) -> None:
        handle = self._handle
        if handle is None:
            raise _released()
        if not -0x80000000 <= layer <= 0x7FFFFFFF:  # ctypes would wrap it silently
            _fit("layer", layer, 32, True)
        status = call(handle, layer, *args)
        if status:
            _lib.check(status)


_launch_writer = _lib_.jitcache_launch_writer
_launch_gather = _lib_.jitcache_launch_gather
_host_write = _lib_.jitcache_model_host_write
_host_gather = _lib_.jitcache_model_host_gather
