"""The NVFP4 MLA writer and gather as torch ops (``torch.ops.jitcache.*``).

Two ops under the ``jitcache`` namespace, bound to a prepared :class:`jitcache.Model`
through an integer id (:func:`model_id`)::

    jitcache::nvfp4_mla_write(Tensor kv_c, Tensor? k_pe, Tensor slot_mapping,
                              Tensor(a!) kv_cache, int model_id, int layer,
                              Tensor(b!)? status=None, str? format=None) -> ()
    jitcache::nvfp4_mla_gather(Tensor kv_cache, Tensor slots, Tensor(a!) out,
                               int model_id, int layer, Tensor(b!)? status=None,
                               str? format=None) -> ()

The record format is the model's (:attr:`jitcache.Model.format`): the cache's last
dimension is its record size, a gathered row has its row width (576, or 512 for b12x-304,
which has no RoPE; its writer takes ``k_pe=None``). ``format``, when given, states which
records the caller's cache holds and must name the model's record
(:attr:`jitcache.Model.record`): a b12x-368 model with per-token scales takes
"b12x-368-per-token" and refuses "b12x-368", the per-layer records, and the other way round
(each reads the other as noise); the fake implementations check shapes with it. The variant (identity, dynamic or per-token) and the
scale come from the layer's binding in the model, never from the scale's value. CPU
tensors run the host executor (bit-identical to the device); CUDA tensors enqueue the
prepared kernel on ``torch.cuda.current_stream()`` without allocating, synchronising or
loading anything, so a CUDA graph can capture it.
Fake implementations let ``torch.compile(fullgraph=True)`` trace both ops.

``status``, when given, is an int32 (or uint32) tensor of one element on the same device
that the kernel ORs error bits into (:data:`STATUS_IDENTITY_SCALE_MISMATCH`,
:data:`STATUS_SLOT_OUT_OF_RANGE`, :data:`STATUS_BAD_LATENT_SCALE`,
:data:`STATUS_PER_TOKEN_SCALE_GIVEN`); without it, a slot
outside the cache is skipped silently, as on the device.

The launch contract: a tensor an op writes (``kv_cache`` and ``status`` of the write,
``out`` and ``status`` of the gather) may share no byte with another argument of the call,
each taken from its first to its last element (row gaps included); tensors only read may
overlap (``kv_c`` and ``k_pe`` as column slices of one [N, 576] tensor). A call that breaks
it raises ValueError naming both tensors (on CPU and CUDA; fake tensors have no memory to
compare). ``slot_mapping`` maps each slot to at most one token (negative slots may repeat):
on CPU a repeat raises :class:`jitcache.InvalidArgumentError` naming the slot and both
tokens, before anything is written; on CUDA it is not checked (the mapping is device
memory) and leaves that slot's record undefined.

:func:`write` and :func:`gather` take the model itself and check every argument.

:func:`kv_global_scale` gives FlashInfer's GLM NVFP4 reader (flashinfer-glm-416 records)
the one device fp32 scale per layer it multiplies every latent value by.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable, Optional, Union

import torch

from . import _lib
from ._torch_checks import (
    LAYOUTS,
    Layout,
    address,
    check_gather,
    check_write,
    disjoint,
    op_layout,
    row_bytes,
)
from .errors import InvalidArgumentError
from .formats import LATENT_DIM, ROPE_DIM, ROW_DIM
from .runtime import Model

__all__ = [
    "LATENT_DIM",
    "ROPE_DIM",
    "ROW_DIM",
    "STATUS_IDENTITY_SCALE_MISMATCH",
    "STATUS_SLOT_OUT_OF_RANGE",
    "STATUS_BAD_LATENT_SCALE",
    "STATUS_PER_TOKEN_SCALE_GIVEN",
    "model_id",
    "get_model",
    "write",
    "gather",
    "new_cache",
    "kv_global_scale",
]

# The kernels' status bits (kernel_templates/nvfp4_mla.cuh and nvfp4_mla_formats.cuh,
# jc::k_status_*, jc::fmt::k_status_*).
STATUS_IDENTITY_SCALE_MISMATCH = 1
STATUS_SLOT_OUT_OF_RANGE = 2
STATUS_BAD_LATENT_SCALE = 4
STATUS_PER_TOKEN_SCALE_GIVEN = 8  # a per-token kernel given an outer scale other than 1.0

_NAMESPACE = "jitcache"
_WRITE = "nvfp4_mla_write"
_GATHER = "nvfp4_mla_gather"
_WRITE_SCHEMA = (
    "(Tensor kv_c, Tensor? k_pe, Tensor slot_mapping, Tensor(a!) kv_cache, int model_id, "
    "int layer, Tensor(b!)? status=None, str? format=None) -> ()"
)
_GATHER_SCHEMA = (
    "(Tensor kv_cache, Tensor slots, Tensor(a!) out, int model_id, int layer, "
    "Tensor(b!)? status=None, str? format=None) -> ()"
)
_BF16, _I64, _I32, _U8 = torch.bfloat16, torch.int64, torch.int32, torch.uint8


# ---- the model registry: integer id -> prepared model ------------------------------------


class _Entry:
    """What the ops need of a registered model, read once at registration."""

    __slots__ = ("ref", "layout", "record_bytes", "num_layers", "id")

    def __init__(self, model: Model, ident: int) -> None:
        self.ref = weakref.ref(model)
        self.layout: Layout = LAYOUTS[model.record]
        self.record_bytes = self.layout.record_bytes
        self.num_layers = int(model.num_layers)
        self.id = ident


_entries: dict[int, _Entry] = {}
_ids: "weakref.WeakKeyDictionary[Model, int]" = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()
_next_id = 1


def _forget(ident: int) -> None:
    _entries.pop(ident, None)


def model_id(model: Union[Model, int]) -> int:
    """The integer the ops know ``model`` by, registering it on first use (idempotent).

    The registry holds the model weakly: keep the Model alive while its id is in use. An int
    that is a registered id is returned as is. Ids count from 1 in registration order, so a
    process that registers its models in the same order gets the same ids (a compiled graph
    holds the id as a constant).
    """
    if isinstance(model, Model):
        ident = _ids.get(model)
        if ident is not None:
            return ident
        global _next_id
        with _registry_lock:
            ident = _ids.get(model)
            if ident is None:
                ident = _next_id
                entry = _Entry(model, ident)  # raises for a released model
                _next_id += 1
                _entries[ident] = entry
                _ids[model] = ident
                weakref.finalize(model, _forget, ident)
        return ident
    if isinstance(model, int) and not isinstance(model, bool):
        _entry(model)
        return model
    raise TypeError(f"model: expected a jitcache.Model or a model id, got {type(model).__name__}")


def _entry(ident: int) -> _Entry:
    entry = _entries.get(ident)
    if entry is None:
        raise InvalidArgumentError(
            f"jitcache.torch: model id {ident} is not registered (never registered with "
            "jitcache.torch.model_id(), or its Model was garbage-collected)"
        )
    return entry


def _model(entry: _Entry) -> Model:
    model = entry.ref()
    if model is None:
        raise InvalidArgumentError(
            f"jitcache.torch: the Model of id {entry.id} was garbage-collected"
        )
    return model


def get_model(ident: int) -> Model:
    """The Model registered under ``ident`` (InvalidArgumentError if there is none)."""
    return _model(_entry(ident))


# ---- the op implementations --------------------------------------------------------------


def _on_cpu(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: Optional[torch.Tensor] = None) -> bool:
    return a.is_cpu and b.is_cpu and c.is_cpu and (d is None or d.is_cpu)


def _on_one_gpu(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: Optional[torch.Tensor] = None
) -> bool:
    index = a.get_device()
    return (
        a.is_cuda
        and b.is_cuda
        and c.is_cuda
        and b.get_device() == index
        and c.get_device() == index
        and (d is None or (d.is_cuda and d.get_device() == index))
    )


def _writer_args(
    kv_c: torch.Tensor,
    k_pe: Optional[torch.Tensor],
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    entry: _Entry,
    layer: int,
    status: Optional[torch.Tensor],
    format: Optional[str],
    placed: Callable[..., bool],
) -> Optional[_lib.WriterLaunch]:
    """The launch struct, or None when there is nothing to write. The common case (dense
    tensors, no status word, no format named) is checked in one expression; anything else,
    and every error, goes through the complete checks, which name the argument."""
    layout = entry.layout
    if (
        status is None
        and format is None
        and k_pe is not None
        and kv_c.dtype is _BF16
        and k_pe.dtype is _BF16
        and slot_mapping.dtype is _I64
        and kv_cache.dtype is _U8
        and kv_c.dim() == 2
        and k_pe.dim() == 2
        and slot_mapping.dim() == 1
        and 2 <= kv_cache.dim() <= 3
        and kv_c.is_contiguous()
        and k_pe.is_contiguous()
        and slot_mapping.is_contiguous()
        and kv_cache.is_contiguous()
        and kv_c.shape[1] == LATENT_DIM
        and k_pe.shape[1] == ROPE_DIM
        and kv_c.shape[0] == k_pe.shape[0] == slot_mapping.shape[0]
        and kv_cache.shape[-1] == layout.record_bytes
        and 0 <= layer < entry.num_layers
        and placed(kv_c, k_pe, slot_mapping, kv_cache)
    ):
        n, kv_stride, pe_stride = kv_c.shape[0], 0, 0
        num_slots = kv_cache.numel() // layout.record_bytes
    else:
        layout = op_layout(layout.format, format)
        n, kv_stride, pe_stride, num_slots = check_write(
            kv_c, k_pe, slot_mapping, kv_cache, layout, entry.num_layers, layer, status
        )
        if not placed(kv_c, kv_c if k_pe is None else k_pe, slot_mapping, kv_cache):
            raise ValueError(f"kv_c: on {kv_c.device}, which this implementation does not serve")
    if n == 0:
        return None
    kv_addr = address("kv_c", kv_c, 16)
    pe_addr = 0 if k_pe is None else address("k_pe", k_pe, 16)
    map_addr = address("slot_mapping", slot_mapping, 8)
    cache_addr = address("kv_cache", kv_cache, 16) if num_slots else 0
    status_addr = 0 if status is None else address("status", status, 4)
    disjoint(
        (
            ("kv_cache", cache_addr, num_slots * layout.record_bytes),
            ("status", status_addr, 4 if status_addr else 0),
        ),
        (
            ("kv_c", kv_addr, row_bytes(n, kv_stride, LATENT_DIM)),
            ("k_pe", pe_addr, row_bytes(n, pe_stride, ROPE_DIM) if pe_addr else 0),
            ("slot_mapping", map_addr, n * 8),
        ),
    )
    return _lib.WriterLaunch(
        kv_addr, kv_stride, pe_addr, pe_stride, map_addr, n, cache_addr, num_slots, status_addr
    )


def _gather_args(
    kv_cache: torch.Tensor,
    slots: torch.Tensor,
    out: torch.Tensor,
    entry: _Entry,
    layer: int,
    status: Optional[torch.Tensor],
    format: Optional[str],
    placed: Callable[..., bool],
) -> Optional[_lib.GatherLaunch]:
    """The launch struct, or None when there is nothing to gather (see _writer_args)."""
    layout = entry.layout
    if (
        status is None
        and format is None
        and kv_cache.dtype is _U8
        and slots.dtype is _I32
        and out.dtype is _BF16
        and 2 <= kv_cache.dim() <= 3
        and slots.dim() == 1
        and out.dim() == 2
        and kv_cache.is_contiguous()
        and slots.is_contiguous()
        and out.is_contiguous()
        and kv_cache.shape[-1] == layout.record_bytes
        and out.shape[1] == layout.row_width
        and out.shape[0] == slots.shape[0]
        and 0 <= layer < entry.num_layers
        and placed(kv_cache, slots, out)
    ):
        n, out_stride = slots.shape[0], 0
        num_slots = kv_cache.numel() // layout.record_bytes
    else:
        layout = op_layout(layout.format, format)
        n, out_stride, num_slots = check_gather(
            kv_cache, slots, out, layout, entry.num_layers, layer, status
        )
        if not placed(kv_cache, slots, out):
            raise ValueError(f"out: on {out.device}, which this implementation does not serve")
    if n == 0:
        return None
    cache_addr = address("kv_cache", kv_cache, 16) if num_slots else 0
    slots_addr = address("slots", slots, 4)
    out_addr = address("out", out, 16)
    status_addr = 0 if status is None else address("status", status, 4)
    disjoint(
        (
            ("out", out_addr, row_bytes(n, out_stride, layout.row_width)),
            ("status", status_addr, 4 if status_addr else 0),
        ),
        (
            ("kv_cache", cache_addr, num_slots * layout.record_bytes),
            ("slots", slots_addr, n * 4),
        ),
    )
    return _lib.GatherLaunch(
        cache_addr, num_slots, slots_addr, n, out_addr, out_stride, status_addr
    )


def _write_cpu(kv_c, k_pe, slot_mapping, kv_cache, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(model_id)
    args = _writer_args(kv_c, k_pe, slot_mapping, kv_cache, entry, layer, status, format, _on_cpu)
    if args is not None:
        _model(entry).host_write(layer, args)


def _gather_cpu(kv_cache, slots, out, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(model_id)
    args = _gather_args(kv_cache, slots, out, entry, layer, status, format, _on_cpu)
    if args is not None:
        _model(entry).host_gather(layer, args)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


def _loaded_on(model: Model, t: torch.Tensor) -> Model:
    """The model, once the tensors are known to be on the GPU its kernels were loaded on."""
    if t.get_device() != model.device_ordinal:
        raise ValueError(
            f"tensors are on {t.device}, but the model's kernels were loaded on "
            f"cuda:{model.device_ordinal} (the Runtime's device_ordinal)"
        )
    return model


def _write_cuda(kv_c, k_pe, slot_mapping, kv_cache, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(model_id)
    args = _writer_args(kv_c, k_pe, slot_mapping, kv_cache, entry, layer, status, format, _on_one_gpu)
    if args is not None:
        _loaded_on(_model(entry), kv_c).launch_writer(layer, args, _stream(kv_c))


def _gather_cuda(kv_cache, slots, out, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(model_id)
    args = _gather_args(kv_cache, slots, out, entry, layer, status, format, _on_one_gpu)
    if args is not None:
        _loaded_on(_model(entry), out).launch_gather(layer, args, _stream(out))


# The fake (meta) implementations check shapes with the record size and row width of the
# format the call names (the model's when it names none).
def _write_fake(kv_c, k_pe, slot_mapping, kv_cache, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(int(model_id))
    layout = op_layout(entry.layout.format, format)
    check_write(kv_c, k_pe, slot_mapping, kv_cache, layout, entry.num_layers, int(layer), status)


def _gather_fake(kv_cache, slots, out, model_id, layer, status=None, format=None):  # noqa: ANN001
    entry = _entry(int(model_id))
    layout = op_layout(entry.layout.format, format)
    check_gather(kv_cache, slots, out, layout, entry.num_layers, int(layer), status)


def _has_op(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, _NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


# The Library object owns the registrations (they go when it is garbage-collected), so a
# reload of this module keeps the first one rather than registering twice.
_library: Optional[torch.library.Library] = globals().get("_library")
if not _has_op(_WRITE):
    _library = torch.library.Library(_NAMESPACE, "FRAGMENT")
    _library.define(_WRITE + _WRITE_SCHEMA)
    _library.define(_GATHER + _GATHER_SCHEMA)
    _library.impl(_WRITE, _write_cpu, "CPU")
    _library.impl(_GATHER, _gather_cpu, "CPU")
    _library.impl(_WRITE, _write_cuda, "CUDA")
    _library.impl(_GATHER, _gather_cuda, "CUDA")
    torch.library.register_fake(f"{_NAMESPACE}::{_WRITE}", _write_fake, lib=_library)
    torch.library.register_fake(f"{_NAMESPACE}::{_GATHER}", _gather_fake, lib=_library)

_write_op = getattr(getattr(torch.ops, _NAMESPACE), _WRITE).default
_gather_op = getattr(getattr(torch.ops, _NAMESPACE), _GATHER).default


# ---- the checked Python entry points -----------------------------------------------------


def _tensor(name: str, value: object) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")


def _int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")


def _format(value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"format: expected a format name, got {type(value).__name__}")


def write(
    model: Union[Model, int],
    layer: int,
    kv_c: torch.Tensor,
    k_pe: Optional[torch.Tensor],
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    status: Optional[torch.Tensor] = None,
    format: Optional[str] = None,
) -> None:
    """Quantizes kv_c [N, 512] and k_pe [N, 64] (bf16; None for a format without RoPE) into
    ``kv_cache`` (uint8 records) at ``slot_mapping`` (int64 [N]; a negative slot is skipped)
    with the layer's writer. ``format``, when given, must name the model's record
    (:attr:`jitcache.Model.record`)."""
    _tensor("kv_c", kv_c)
    if k_pe is not None:
        _tensor("k_pe", k_pe)
    _tensor("slot_mapping", slot_mapping)
    _tensor("kv_cache", kv_cache)
    if status is not None:
        _tensor("status", status)
    _int("layer", layer)
    _format(format)
    _write_op(kv_c, k_pe, slot_mapping, kv_cache, model_id(model), layer, status, format)


def gather(
    model: Union[Model, int],
    layer: int,
    kv_cache: torch.Tensor,
    slots: torch.Tensor,
    out: torch.Tensor,
    status: Optional[torch.Tensor] = None,
    format: Optional[str] = None,
) -> None:
    """Dequantizes the records at ``slots`` (int32 [R]; a negative slot gives a zero row)
    into ``out`` (bf16 [R, 576], [R, 512] for b12x-304) with the layer's gather."""
    _tensor("kv_cache", kv_cache)
    _tensor("slots", slots)
    _tensor("out", out)
    if status is not None:
        _tensor("status", status)
    _int("layer", layer)
    _format(format)
    _gather_op(kv_cache, slots, out, model_id(model), layer, status, format)


def new_cache(
    model: Union[Model, int],
    num_blocks: int,
    block_size: int,
    device: Union[str, torch.device, None] = None,
) -> torch.Tensor:
    """A zeroed uint8 KV cache [num_blocks, block_size, record_bytes] for ``model``."""
    entry = _entry(model_id(model))
    return torch.zeros((num_blocks, block_size, entry.record_bytes), dtype=torch.uint8, device=device)


# The format whose reader takes the layer's outer scale as a tensor of its own.
_GLOBAL_SCALE_FORMAT = "flashinfer-glm-416"


def kv_global_scale(
    model: Union[Model, int],
    layer: int,
    device: Union[str, torch.device, None] = None,
) -> torch.Tensor:
    """The ``kv_global_scale`` of ``layer`` for FlashInfer's ``SparseMLAGlmNvfp4Sm120Wrapper.run``:
    a new one-element float32 tensor on ``device`` (default: the CPU) holding the scale the
    layer's records were written with, s_l for a dynamic layer and exactly 1.0 for an
    identity one. The reader computes each latent value as E2M1 x E4M3 x kv_global_scale,
    the value the layer's gather returns (docs/record-formats.md).

    ``model`` must be a flashinfer-glm-416 model (InvalidArgumentError otherwise, naming its
    format: the other engines' readers take no such tensor). ``layer`` is checked as the ops
    check it. Make one per layer at model load and keep it: FlashInfer reads it on the
    device during CUDA graph replay, and creating it copies to the device."""
    _int("layer", layer)
    m = get_model(model_id(model))
    if m.format != _GLOBAL_SCALE_FORMAT:
        raise InvalidArgumentError(
            f"kv_global_scale: the model writes {m.format} records; only {_GLOBAL_SCALE_FORMAT} "
            "records are read with a kv_global_scale tensor (FlashInfer's GLM NVFP4 reader)"
        )
    info = m.layer(layer)
    value = 1.0 if info.mode == "identity" else float(info.scale)
    if not value > 0.0 or value == float("inf"):  # never true of a prepared layer
        raise InvalidArgumentError(f"kv_global_scale: layer {layer} has no positive finite scale ({value!r})")
    return torch.tensor([value], dtype=torch.float32, device=device)
