"""The host executor from numpy: the kernels' own lane bodies on the CPU.

Bit-exact with the device kernels and with ``jitcache kv quantize`` / ``kv dequantize``.
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

__all__ = [
    "RECORD_BYTES",
    "LATENT_DIM",
    "ROPE_DIM",
    "ROW_DIM",
    "bf16_from_float",
    "bf16_to_float",
    "quantize",
    "dequantize",
]

RECORD_BYTES = {"bf16": 432, "fp8": 368}
LATENT_DIM = 512
ROPE_DIM = 64
ROW_DIM = LATENT_DIM + ROPE_DIM
_ALIGN = 16  # the launches' alignment rule for kv_c, k_pe, cache and out
_ROPES = {"bf16": _lib.ROPE_BF16, "fp8": _lib.ROPE_FP8}
_lib_ = _lib.lib


def _rope(rope: str) -> tuple[int, int]:
    if rope not in _ROPES:
        raise ValueError(f"rope: expected 'bf16' or 'fp8', got {rope!r}")
    return _ROPES[rope], RECORD_BYTES[rope]


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
    kv_c: np.ndarray, k_pe: Optional[np.ndarray], scale: float, rope: str = "bf16"
) -> np.ndarray:
    """kv_c [N, 512] and k_pe [N, 64] (float32, or bf16 bits as uint16; k_pe None: zeros)
    -> nvfp4_ds_mla records, uint8 [N, record_bytes]. ``scale`` is the layer's s_l: exactly
    1.0 runs the identity writer, anything else the dynamic one."""
    rope_value, record_bytes = _rope(rope)
    kv = _bf16_rows(kv_c, LATENT_DIM, "kv_c")
    n = kv.shape[0]
    if k_pe is None:
        pe = _empty_aligned((n, ROPE_DIM), np.uint16, zero=True)
    else:
        kv_dtype = np.asarray(kv_c).dtype
        pe_dtype = np.asarray(k_pe).dtype
        if pe_dtype != kv_dtype:
            raise TypeError(f"k_pe: expected {kv_dtype} like kv_c, got {pe_dtype}")
        pe = _bf16_rows(k_pe, ROPE_DIM, "k_pe")
        if pe.shape[0] != n:
            raise ValueError(f"k_pe: {pe.shape[0]} rows, but kv_c has {n}")
    records = _empty_aligned((n, record_bytes), np.uint8, zero=True)
    slots = np.arange(n, dtype=np.int64)
    status = np.zeros(1, dtype=np.uint32)
    args = _lib.WriterLaunch(
        kv_c=kv.ctypes.data,
        kv_c_stride=LATENT_DIM,
        k_pe=pe.ctypes.data,
        k_pe_stride=ROPE_DIM,
        slot_mapping=slots.ctypes.data,
        num_tokens=n,
        cache=records.ctypes.data,
        num_slots=n,
        status=status.ctypes.data,
    )
    _lib.check(_lib_.jitcache_host_write(float(scale), rope_value, byref(args)))
    if status[0]:
        raise InternalError(f"jitcache: host writer reported status bits {int(status[0]):#x}")
    return records


def dequantize(records: object, scale: float, rope: str = "bf16") -> np.ndarray:
    """nvfp4_ds_mla records (uint8 [N, record_bytes], or flat bytes whose length is a
    multiple of record_bytes) -> float32 [N, 576]: the bf16 values the gather writes."""
    return bf16_to_float(_gather_bits(records, scale, rope))


def _gather_bits(records: object, scale: float, rope: str) -> np.ndarray:
    rope_value, record_bytes = _rope(rope)
    if isinstance(records, np.ndarray):
        r = records
        if r.dtype != np.uint8:
            raise TypeError(f"records: expected uint8, got {r.dtype}")
        if r.ndim == 2:
            if r.shape[1] != record_bytes:
                raise ValueError(
                    f"records: expected shape [N, {record_bytes}] for {rope} RoPE, "
                    f"got {list(r.shape)}"
                )
        elif r.ndim != 1:
            raise ValueError(f"records: expected [N, {record_bytes}] or flat bytes, got {r.ndim}-D")
    else:
        r = np.frombuffer(memoryview(records).cast("B"), dtype=np.uint8)
    if r.size % record_bytes:
        raise ValueError(
            f"records: {r.size} bytes is not a multiple of the {record_bytes}-byte record ({rope} RoPE)"
        )
    n = r.size // record_bytes
    if n > 0x7FFFFFFF:
        raise ValueError(f"records: {n} records; at most 2^31 - 1 per call")
    r = _aligned(r.reshape(n, record_bytes))
    out = _empty_aligned((n, ROW_DIM), np.uint16)
    slots = np.arange(n, dtype=np.int32)
    status = np.zeros(1, dtype=np.uint32)
    args = _lib.GatherLaunch(
        cache=r.ctypes.data,
        num_slots=n,
        slots=slots.ctypes.data,
        num_rows=n,
        out=out.ctypes.data,
        out_stride=ROW_DIM,
        status=status.ctypes.data,
    )
    _lib.check(_lib_.jitcache_host_gather(float(scale), rope_value, byref(args)))
    if status[0]:
        raise InternalError(f"jitcache: host gather reported status bits {int(status[0]):#x}")
    return out
