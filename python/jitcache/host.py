"""The host executor from numpy: the kernels' own lane bodies on the CPU.

Bit-exact with the device kernels and with ``jitcache kv quantize`` / ``kv dequantize``, in
every record format (docs/record-formats.md).
Array dtypes are strict: float32 or bf16 bits (uint16); a float64 array is refused rather
than rounded twice (float64 -> float32 -> bf16). Shape and dtype problems raise
ValueError / TypeError; a scale the kernels refuse raises jitcache.InvalidArgumentError.
"""

from __future__ import annotations

from ctypes import byref
from typing import Optional

import numpy as np

from . import _lib
from .errors import InternalError
from .formats import (
    FORMATS,
    LATENT_DIM,
    RECORD_BYTES,
    ROPE_ALIASES,
    ROPE_DIM,
    ROW_DIM,
    has_rope,
    latent_scales,
    page_size,
    record_format,
    record_latent_scale,
    row_width,
)

__all__ = [
    "FORMATS",
    "ROPE_ALIASES",
    "RECORD_BYTES",
    "LATENT_DIM",
    "ROPE_DIM",
    "ROW_DIM",
    "LATENT_SCALES",
    "record_format",
    "row_width",
    "bf16_from_float",
    "bf16_to_float",
    "quantize",
    "dequantize",
]

# The latent scale a call may name: "per-token" (each token's own scale, in its record;
# b12x-368 and b12x-304), or the per-layer scale s_l, for which "identity" (s_l exactly 1.0)
# and "dynamic" say which kernel a layer's scale gives, and "per-layer" lets the scale decide.
LATENT_SCALES = ("per-layer", "identity", "dynamic", "per-token")
_ALIGN = 16  # the launches' alignment rule for kv_c, k_pe, cache and out
_lib_ = _lib.lib


def _latent_choice(name: str, latent_scale: Optional[str], scale: float) -> int:
    """The C ABI's latent choice for a call; ValueError for a name it does not know or a
    scale that contradicts it. What the format has no records for, the library refuses."""
    if latent_scale is None:
        per_token_only = latent_scales(name) == ("per-token",)
        return _lib.LATENT_PER_TOKEN if per_token_only else _lib.LATENT_PER_LAYER
    if latent_scale not in LATENT_SCALES:
        raise ValueError(f"latent_scale: expected one of {', '.join(LATENT_SCALES)}, got {latent_scale!r}")
    if latent_scale == "per-token":
        return _lib.LATENT_PER_TOKEN
    if latent_scale == "identity" and scale != 1.0:
        raise ValueError(f"latent_scale: 'identity' is the kernel of scale 1.0, got scale {scale!r}")
    return _lib.LATENT_PER_LAYER


def _call(format: Optional[str], rope: Optional[str], latent_scale: Optional[str], scale: float):
    name = record_format(format, rope)
    latent_scale = record_latent_scale(format, latent_scale)  # "b12x-368-per-token" fixes it
    value = float(scale)
    return name, _lib.FORMATS[name], _latent_choice(name, latent_scale, value), value


def _empty_aligned(shape: tuple[int, ...], dtype: np.dtype, zero: bool = False) -> np.ndarray:
    """A C-contiguous array whose data starts on a 16-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _aligned(a: np.ndarray) -> np.ndarray:
    """a itself when C-contiguous and 16-byte aligned, else an aligned copy."""
    if a.flags.c_contiguous and a.ctypes.data % _ALIGN == 0:
        return a
    out = _empty_aligned(a.shape, a.dtype)
    out[...] = a
    return out


def bf16_from_float(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even, every NaN to 0x7FFF."""
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"bf16_from_float: expected float32, got {a.dtype}")
    a = np.ascontiguousarray(a)
    out = np.empty(a.shape, dtype=np.uint16)
    if a.size:
        _lib.check(_lib_.jitcache_host_bf16_from_float(a.ctypes.data, out.ctypes.data, a.size))
    return out


def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32, exactly."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"bf16_to_float: expected uint16 (bf16 bits), got {b.dtype}")
    return (b.astype(np.uint32) << 16).view(np.float32)


def _bf16_rows(x: np.ndarray, columns: int, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[1] != columns:
        raise ValueError(f"{name}: expected shape [N, {columns}], got {list(a.shape)}")
    if a.dtype == np.float32:
        return _aligned(bf16_from_float(a))
    if a.dtype == np.uint16:
        return _aligned(a)
    raise TypeError(f"{name}: expected float32 or uint16 (bf16 bits), got {a.dtype}")


def quantize(
    kv_c: np.ndarray,
    k_pe: Optional[np.ndarray],
    scale: float = 1.0,
    rope: Optional[str] = None,
    *,
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> np.ndarray:
    """kv_c [N, 512] and k_pe [N, 64] (float32, or bf16 bits as uint16; k_pe None: zeros,
    and never read for b12x-304, which has no RoPE) -> records, uint8 [N, record bytes].

    ``format``: a name of :data:`FORMATS` (``rope`` "bf16" / "fp8" is the older spelling of
    the first two; default b12x-432). ``scale`` is the layer's s_l: exactly 1.0 runs the
    identity writer, anything else the dynamic one. ``latent_scale="per-token"`` writes each
    token's own scale into its record instead (b12x-368, and b12x-304, whose default it
    is); ``scale`` must then stay 1.0. The record name "b12x-368-per-token" is b12x-368
    with ``latent_scale="per-token"``."""
    name, fmt, latent, value = _call(format, rope, latent_scale, scale)
    record_bytes = RECORD_BYTES[name]
    kv = _bf16_rows(kv_c, LATENT_DIM, "kv_c")
    n = kv.shape[0]
    page = page_size(name)
    if page > 1 and k_pe is not None:
        raise ValueError(f"k_pe: {name} records are written from kv_c's rows of 512 alone (give k_pe=None)")
    if k_pe is None:
        pe = None if not has_rope(name) else _empty_aligned((n, ROPE_DIM), np.uint16, zero=True)
    else:
        kv_dtype = np.asarray(kv_c).dtype
        pe_dtype = np.asarray(k_pe).dtype
        if pe_dtype != kv_dtype:
            raise TypeError(f"k_pe: expected {kv_dtype} like kv_c, got {pe_dtype}")
        pe = _bf16_rows(k_pe, ROPE_DIM, "k_pe")
        if pe.shape[0] != n:
            raise ValueError(f"k_pe: {pe.shape[0]} rows, but kv_c has {n}")
    # A page-major format's cache is whole pages, [pages, 64, record bytes] as its engine
    # shapes it; the last page's slots past N stay zero bytes.
    pages = -(-n // page)
    records = _empty_aligned((n, record_bytes) if page == 1 else (pages, page, record_bytes), np.uint8, zero=True)
    slots = np.arange(n, dtype=np.int64)
    status = np.zeros(1, dtype=np.uint32)
    args = _lib.WriterLaunch(
        kv_c=kv.ctypes.data,
        kv_c_stride=LATENT_DIM,
        k_pe=0 if pe is None else pe.ctypes.data,
        k_pe_stride=ROPE_DIM,
        slot_mapping=slots.ctypes.data,
        num_tokens=n,
        cache=records.ctypes.data,
        num_slots=pages * page,
        status=status.ctypes.data,
    )
    _lib.check(_lib_.jitcache_host_write_format(value, fmt, latent, byref(args)))
    if status[0]:
        raise InternalError(f"jitcache: host writer reported status bits {int(status[0]):#x}")
    return records


def dequantize(
    records: object,
    scale: float = 1.0,
    rope: Optional[str] = None,
    *,
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> np.ndarray:
    """Records (uint8 [N, record bytes], or flat bytes whose length is a multiple of the
    record size) -> float32 [N, 576] ([N, 512] for b12x-304): the bf16 values the gather
    writes. ``scale``, ``rope``, ``format`` and ``latent_scale`` as in :func:`quantize`: the
    reader must be told how the records were written."""
    return bf16_to_float(_gather_bits(records, scale, rope, format, latent_scale))


def _gather_bits(
    records: object,
    scale: float,
    rope: Optional[str],
    format: Optional[str] = None,
    latent_scale: Optional[str] = None,
) -> np.ndarray:
    name, fmt, latent, value = _call(format, rope, latent_scale, scale)
    record_bytes = RECORD_BYTES[name]
    if isinstance(records, np.ndarray):
        r = records
        if r.dtype != np.uint8:
            raise TypeError(f"records: expected uint8, got {r.dtype}")
        if r.ndim == 3 and page_size(name) > 1:
            if r.shape[1:] != (page_size(name), record_bytes):
                raise ValueError(
                    f"records: expected shape [pages, {page_size(name)}, {record_bytes}] for {name}, "
                    f"got {list(r.shape)}"
                )
            r = r.reshape(-1)
        elif r.ndim == 2:
            if r.shape[1] != record_bytes:
                raise ValueError(
                    f"records: expected shape [N, {record_bytes}] for {name}, got {list(r.shape)}"
                )
        elif r.ndim != 1:
            raise ValueError(f"records: expected [N, {record_bytes}] or flat bytes, got {r.ndim}-D")
    else:
        r = np.frombuffer(memoryview(records).cast("B"), dtype=np.uint8)
    if r.size % record_bytes:
        raise ValueError(
            f"records: {r.size} bytes is not a multiple of the {record_bytes}-byte record ({name})"
        )
    n = r.size // record_bytes
    if n % page_size(name):
        raise ValueError(
            f"records: {n} records is not a whole number of {page_size(name)}-slot pages of {name}"
        )
    if n > 0x7FFFFFFF:
        raise ValueError(f"records: {n} records; at most 2^31 - 1 per call")
    r = _aligned(r.reshape(n, record_bytes))
    width = row_width(name)
    out = _empty_aligned((n, width), np.uint16)
    slots = np.arange(n, dtype=np.int32)
    status = np.zeros(1, dtype=np.uint32)
    args = _lib.GatherLaunch(
        cache=r.ctypes.data,
        num_slots=n,
        slots=slots.ctypes.data,
        num_rows=n,
        out=out.ctypes.data,
        out_stride=width,
        status=status.ctypes.data,
    )
    _lib.check(_lib_.jitcache_host_gather_format(value, fmt, latent, byref(args)))
    if status[0]:
        raise InternalError(f"jitcache: host gather reported status bits {int(status[0]):#x}")
    return out
