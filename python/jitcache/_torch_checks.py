"""Argument checks of the jitcache.torch ops: traceable (shapes, dtypes, strides, devices;
fake tensors pass through them), plus the launch contract's alignment and overlap checks on
real tensors. Every failure names the argument."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .errors import InvalidArgumentError
from .formats import (
    LATENT_DIM,
    RECORD_BYTES,
    RECORDS,
    ROPE_DIM,
    has_rope,
    page_size,
    record_name,
    row_width,
)

_STATUS_DTYPES = (torch.int32, torch.uint32)


class Layout(NamedTuple):
    """A record as the ops see it."""

    format: str  # the record name (jitcache.formats.RECORDS): "b12x-368-per-token" too
    record_bytes: int
    row_width: int  # values per gathered row: 576, or 512 without RoPE
    has_rope: bool  # whether the writer reads k_pe


LAYOUTS = {name: Layout(name, RECORD_BYTES[name], row_width(name), has_rope(name)) for name in RECORDS}


def op_layout(model_record: str, given: Optional[str]) -> Layout:
    """The layout a call runs with: its model's record (Model.record). ``format``, when the
    caller gives it, states which records the cache holds and must name the model's record:
    "b12x-368" (or "fp8") the per-layer ones, "b12x-368-per-token" the per-token ones, which
    read as noise for each other."""
    if given is None or given == model_record:
        return LAYOUTS[model_record]
    try:
        name = record_name(given)
    except ValueError as error:
        raise ValueError(str(error)) from None
    if name != model_record:
        raise ValueError(
            f"format: the call says {given!r}, but the model writes and reads {model_record} records"
        )
    return LAYOUTS[name]


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")


def _rows(name: str, t: torch.Tensor, width: int) -> int:
    """Checks a [N, width] bf16 matrix with contiguous rows; returns its row stride (0: dense)."""
    _dtype(name, t, torch.bfloat16)
    if t.dim() != 2 or t.shape[1] != width:
        raise ValueError(f"{name}: expected shape [N, {width}], got {_shape(t)}")
    if t.stride(1) != 1:
        raise ValueError(f"{name}: each row must be contiguous (stride 1), got strides {t.stride()}")
    if t.shape[0] <= 1:
        return 0
    stride = t.stride(0)
    if stride < width or stride % 8 != 0:
        raise ValueError(
            f"{name}: row stride {stride} elements must be >= {width} and a multiple of 8 "
            f"(16 bytes)"
        )
    return stride


def _vector(name: str, t: torch.Tensor, dtype: torch.dtype, length: object) -> None:
    _dtype(name, t, dtype)
    if t.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D tensor, got shape {_shape(t)}")
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{name}: expected {length} elements, got {t.shape[0]}")
    if t.shape[0] > 1 and t.stride(0) != 1:
        raise ValueError(f"{name}: must be contiguous, got stride {t.stride(0)}")


def _cache(t: torch.Tensor, layout: Layout) -> int:
    """Checks the KV cache, uint8 [num_slots, R] or [num_blocks, block_size, R] laid out
    densely; returns num_slots."""
    _dtype("kv_cache", t, torch.uint8)
    record_bytes = layout.record_bytes
    if t.dim() not in (2, 3) or t.shape[-1] != record_bytes:
        raise ValueError(
            f"kv_cache: expected shape [num_slots, {record_bytes}] or "
            f"[num_blocks, block_size, {record_bytes}] for {layout.format} records, got {_shape(t)}"
        )
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if size != 1 and stride != expected:
            raise ValueError(
                f"kv_cache: records must be packed densely (a contiguous tensor), got shape "
                f"{_shape(t)} with strides {t.stride()}"
            )
        expected *= size
    # A page-major format's cache is whole pages, [num_pages, 64, R] as its engine shapes it
    # (the row of a page is not a slot's record: data parts, then footers).
    page = page_size(layout.format)
    if page > 1 and ((t.dim() == 3 and t.shape[1] != page) or (t.numel() // record_bytes) % page):
        raise ValueError(
            f"kv_cache: {layout.format} records come in pages of {page} slots: expected "
            f"[num_pages, {page}, {record_bytes}] or [num_pages * {page}, {record_bytes}], got {_shape(t)}"
        )
    return t.numel() // record_bytes


def _status(t: Optional[torch.Tensor], device: torch.device) -> None:
    if t is None:
        return
    if t.dtype not in _STATUS_DTYPES:
        raise TypeError(f"status: expected dtype torch.int32 or torch.uint32, got {t.dtype}")
    if t.numel() != 1:
        raise ValueError(f"status: expected one element, got shape {_shape(t)}")
    if t.device != device:
        raise ValueError(f"status: on {t.device}, but the other tensors are on {device}")


def _same_device(named: tuple[tuple[str, torch.Tensor], ...]) -> torch.device:
    device = named[0][1].device
    for name, t in named[1:]:
        if t.device != device:
            raise ValueError(
                f"{name}: on {t.device}, but {named[0][0]} is on {device}; every tensor must be "
                f"on one device"
            )
    return device


def check_layer(num_layers: int, layer: int) -> None:
    if not 0 <= layer < num_layers:
        raise InvalidArgumentError(f"layer: {layer} is out of range (the model has {num_layers} layers)")


def check_write(
    kv_c: torch.Tensor,
    k_pe: Optional[torch.Tensor],
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    layout: Layout,
    num_layers: int,
    layer: int,
    status: Optional[torch.Tensor],
) -> tuple[int, int, int, int]:
    """Returns (num_tokens, kv_c stride, k_pe stride, num_slots); raises on a bad argument.
    k_pe may be None only for a format without RoPE, which never reads it."""
    if k_pe is None and layout.has_rope:
        raise ValueError(f"k_pe: None, but {layout.format} records hold the RoPE key (bf16 [N, 64])")
    named = (("kv_c", kv_c), ("slot_mapping", slot_mapping), ("kv_cache", kv_cache))
    device = _same_device(named if k_pe is None else named + (("k_pe", k_pe),))
    kv_stride = _rows("kv_c", kv_c, LATENT_DIM)
    n = kv_c.shape[0]
    pe_stride = 0
    if k_pe is not None:
        pe_stride = _rows("k_pe", k_pe, ROPE_DIM)
        if k_pe.shape[0] != n:
            raise ValueError(f"k_pe: {k_pe.shape[0]} rows, but kv_c has {n}")
    _vector("slot_mapping", slot_mapping, torch.int64, n)
    num_slots = _cache(kv_cache, layout)
    _status(status, device)
    check_layer(num_layers, layer)
    return n, kv_stride, pe_stride, num_slots


def check_gather(
    kv_cache: torch.Tensor,
    slots: torch.Tensor,
    out: torch.Tensor,
    layout: Layout,
    num_layers: int,
    layer: int,
    status: Optional[torch.Tensor],
) -> tuple[int, int, int]:
    """Returns (num_rows, out stride, num_slots); raises on a bad argument. ``out`` has the
    format's row width: 576, or 512 for a format without RoPE."""
    device = _same_device((("kv_cache", kv_cache), ("slots", slots), ("out", out)))
    num_slots = _cache(kv_cache, layout)
    _vector("slots", slots, torch.int32, None)
    out_stride = _rows("out", out, layout.row_width)
    if out.shape[0] != slots.shape[0]:
        raise ValueError(f"out: {out.shape[0]} rows, but slots has {slots.shape[0]}")
    _status(status, device)
    check_layer(num_layers, layer)
    return slots.shape[0], out_stride, num_slots


def address(name: str, t: torch.Tensor, align: int) -> int:
    where = t.data_ptr()
    if where % align:
        raise ValueError(f"{name}: data at {where:#x} is not {align}-byte aligned")
    return where


def row_bytes(n: int, stride: int, width: int) -> int:
    """The bytes from the first of ``n`` bf16 rows to the end of the last, row gaps included
    (the library's conservative range, runtime/kv/launch_contract.hpp); stride 0: dense."""
    return ((n - 1) * (stride or width) + width) * 2


def disjoint(writes: tuple, reads: tuple) -> None:
    """Raises ValueError when a written span (name, first byte, bytes; 0 bytes: untouched)
    shares a byte with any other span."""
    for i, (name, begin, size) in enumerate(writes):
        if not size:
            continue
        end = begin + size
        for other, other_begin, other_size in writes[i + 1 :] + reads:
            if other_size and begin < other_begin + other_size and other_begin < end:
                raise ValueError(
                    f"{name}: [{begin:#x}, +{size} bytes) overlaps {other} "
                    f"[{other_begin:#x}, +{other_size} bytes); a tensor the op writes may share "
                    "no memory with another argument"
                )
