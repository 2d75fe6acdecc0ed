"""Loads libjitcache.so with ctypes and declares every function of include/jitcache/jitcache.h.

Lookup: the environment variable JITCACHE_LIBRARY (a path to the shared library), else the
copy bundled with the package (``<package>/lib/libjitcache.so.1``). The library's
``jitcache_abi_version()`` must equal :data:`ABI_VERSION`, else importing fails.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

from . import formats as _formats
from .errors import error_for

ABI_VERSION = 1
ENV_LIBRARY = "JITCACHE_LIBRARY"
BUNDLED_NAME = "libjitcache.so.1"

# jitcache_rope
ROPE_BF16 = 0
ROPE_FP8 = 1
# jitcache_record_format, by name (the names of the C++ API and the CLI): its values are the
# rows of the library's format table in order, as formats.FORMATS lists them (checked
# against jitcache_format_record_bytes by the tests); -1 in the prepare options: the
# record of `rope`
FORMATS = {name: value for value, name in enumerate(_formats.FORMATS)}
FORMAT_FROM_ROPE = -1
# jitcache_latent_choice
LATENT_PER_LAYER = 0
LATENT_PER_TOKEN = 1
# jitcache_device_use
DEVICE_AUTO = 0
DEVICE_NONE = 1
# jitcache_cache_requirement
CACHE_FROM_ENVIRONMENT = 0
CACHE_OPTIONAL = 1
CACHE_REQUIRED = 2
# jitcache_cache_mode, jitcache_scale_mode, jitcache_scale_source, jitcache_log_level
CACHE_MODES = {0: "read-write", 1: "read-only", 2: "memory-only"}
SCALE_MODES = {0: "identity", 1: "dynamic"}
SCALE_SOURCES = {0: "override", 1: "checkpoint", 2: "identity-default", 3: "draft-identity"}
LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERROR, LOG_OFF = 0, 1, 2, 3, 4
# jitcache_source_kind, jitcache_lookup_outcome
SOURCE_KINDS = {"cuda": 0, "nvvm": 1, "ptx": 2}
LOOKUP_OUTCOMES = {0: "hit", 1: "miss", 2: "verify"}

_enum = c_int  # C enums of this header are int-sized


class RuntimeOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("cache_dir", c_char_p),
        ("jobs", c_uint32),
        ("device", _enum),
        ("device_ordinal", c_int32),
        ("cache_max_bytes", c_uint64),
        ("cache_requirement", _enum),
        ("remote", c_char_p),
        ("verify_spec", c_double),  # negative (the _init default): JITCACHE_VERIFY_SPEC
        ("no_compile", c_int32),  # 1 on, 0 off, negative (the _init default): JITCACHE_NO_COMPILE
        ("providers", c_char_p),  # ':'-separated provider directories; NULL: none besides JITCACHE_PROVIDERS
    ]


class Fact(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("value", c_char_p),
    ]


class Header(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("text", c_char_p),  # `size` bytes, not NUL-terminated
        ("size", c_size_t),
    ]


class CompileRequest(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("family", c_char_p),
        ("spec", POINTER(Fact)),
        ("num_spec", c_size_t),
        ("kind", _enum),
        ("text", c_char_p),  # `text_size` bytes: NVVM bitcode may hold NULs
        ("text_size", c_size_t),
        ("headers", POINTER(Header)),
        ("num_headers", c_size_t),
        ("entry", c_char_p),
        ("target", c_char_p),
        ("options", POINTER(c_char_p)),
        ("num_options", c_size_t),
    ]


class PrepareOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("checkpoint", c_char_p),
        ("rope", _enum),
        ("target", c_char_p),
        ("scales_override", c_char_p),
        ("revision", c_char_p),
        ("format", c_int32),  # a FORMATS value, or FORMAT_FROM_ROPE
        ("latent_scale", c_int32),  # LATENT_PER_LAYER or LATENT_PER_TOKEN
    ]


class DeviceStatus(Structure):
    _fields_ = [
        ("available", c_int32),
        ("reason", c_char_p),
        ("name", c_char_p),
        ("target", c_char_p),
    ]


class CacheStatus(Structure):
    _fields_ = [
        ("mode", _enum),
        ("dir", c_char_p),
        ("reason", c_char_p),
    ]


class LayerInfoC(Structure):
    _fields_ = [
        ("layer", c_int32),
        ("scale", c_float),
        ("mode", _enum),
        ("source", _enum),
    ]


class PrepareStats(Structure):
    _fields_ = [
        ("variants", c_uint64),
        ("cached", c_uint64),
        ("compiled", c_uint64),
        ("wall_ms", c_double),
    ]


class WriterLaunch(Structure):
    _fields_ = [
        ("kv_c", c_uint64),
        ("kv_c_stride", c_int64),
        ("k_pe", c_uint64),
        ("k_pe_stride", c_int64),
        ("slot_mapping", c_uint64),
        ("num_tokens", c_int64),
        ("cache", c_uint64),
        ("num_slots", c_int64),
        ("status", c_uint64),
    ]


class GatherLaunch(Structure):
    _fields_ = [
        ("cache", c_uint64),
        ("num_slots", c_int64),
        ("slots", c_uint64),
        ("num_rows", c_int64),
        ("out", c_uint64),
        ("out_stride", c_int64),
        ("status", c_uint64),
    ]


# void (*)(void* user_data, jitcache_log_level, const char* message, size_t length)
LOG_FN = CFUNCTYPE(None, c_void_p, _enum, c_void_p, c_size_t)

_runtime_p = c_void_p
_model_p = c_void_p
_kernel_p = c_void_p
_status = c_int

# name: (restype, argtypes) for every function of the header.
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "jitcache_version": (c_char_p, []),
    "jitcache_abi_version": (c_uint32, []),
    "jitcache_status_name": (c_char_p, [_status]),
    "jitcache_last_error": (c_char_p, []),
    "jitcache_set_log_callback": (_status, [LOG_FN, c_void_p]),
    "jitcache_set_log_level": (_status, [_enum]),
    "jitcache_runtime_options_init": (None, [POINTER(RuntimeOptions)]),
    "jitcache_runtime_open": (_status, [POINTER(RuntimeOptions), POINTER(_runtime_p)]),
    "jitcache_runtime_close": (None, [_runtime_p]),
    "jitcache_runtime_device": (_status, [_runtime_p, POINTER(DeviceStatus)]),
    "jitcache_runtime_cache_dir": (c_char_p, [_runtime_p]),
    "jitcache_runtime_cache_status": (_status, [_runtime_p, POINTER(CacheStatus)]),
    "jitcache_runtime_stats": (_status, [_runtime_p, POINTER(c_void_p)]),
    "jitcache_prepare": (
        _status,
        [_runtime_p, c_char_p, _enum, c_char_p, c_char_p, POINTER(_model_p)],
    ),
    "jitcache_model_release": (None, [_model_p]),
    "jitcache_model_num_layers": (_status, [_model_p, POINTER(c_int32)]),
    "jitcache_model_layer": (_status, [_model_p, c_int32, POINTER(LayerInfoC)]),
    "jitcache_model_stats": (_status, [_model_p, POINTER(PrepareStats)]),
    "jitcache_model_target": (c_char_p, [_model_p]),
    "jitcache_launch_writer": (_status, [_model_p, c_int32, POINTER(WriterLaunch), c_void_p]),
    "jitcache_launch_gather": (_status, [_model_p, c_int32, POINTER(GatherLaunch), c_void_p]),
    "jitcache_prepare_options_init": (None, [POINTER(PrepareOptions)]),
    "jitcache_prepare_with": (
        _status,
        [_runtime_p, POINTER(PrepareOptions), POINTER(_model_p)],
    ),
    "jitcache_runtime_coverage": (
        _status,
        [_runtime_p, POINTER(PrepareOptions), POINTER(c_void_p)],
    ),
    "jitcache_string_free": (None, [c_void_p]),
    "jitcache_model_describe": (_status, [_model_p, POINTER(c_void_p)]),
    "jitcache_resolve_scales": (
        _status,
        [c_char_p, c_char_p, c_char_p, POINTER(c_void_p)],
    ),
    "jitcache_host_bf16_from_float": (_status, [c_void_p, c_void_p, c_size_t]),
    "jitcache_host_write": (_status, [c_float, _enum, POINTER(WriterLaunch)]),
    "jitcache_host_gather": (_status, [c_float, _enum, POINTER(GatherLaunch)]),
    "jitcache_model_host_write": (_status, [_model_p, c_int32, POINTER(WriterLaunch)]),
    "jitcache_model_host_gather": (_status, [_model_p, c_int32, POINTER(GatherLaunch)]),
    "jitcache_record_bytes": (c_uint32, [_enum]),
    "jitcache_host_write_format": (_status, [c_float, c_int32, c_int32, POINTER(WriterLaunch)]),
    "jitcache_host_gather_format": (_status, [c_float, c_int32, c_int32, POINTER(GatherLaunch)]),
    "jitcache_format_record_bytes": (c_uint32, [c_int32]),
    "jitcache_compile_request_init": (None, [POINTER(CompileRequest)]),
    "jitcache_declare_family": (_status, [_runtime_p, c_char_p]),
    "jitcache_compile": (
        _status,
        [_runtime_p, POINTER(CompileRequest), POINTER(_kernel_p)],
    ),
    "jitcache_lookup": (
        _status,
        [_runtime_p, c_char_p, POINTER(Fact), c_size_t, c_char_p, POINTER(_enum), POINTER(_kernel_p)],
    ),
    "jitcache_kernel_cubin": (_status, [_kernel_p, POINTER(c_void_p), POINTER(c_size_t)]),
    "jitcache_kernel_describe": (_status, [_kernel_p, POINTER(c_void_p)]),
    "jitcache_kernel_release": (None, [_kernel_p]),
}

def default_library_path() -> Path:
    """Where the library is looked for: $JITCACHE_LIBRARY, else the bundled copy."""
    given = os.environ.get(ENV_LIBRARY, "").strip()
    if given:
        return Path(os.path.abspath(given))
    return Path(__file__).resolve().parent / "lib" / BUNDLED_NAME


def check_abi(path: os.PathLike[str] | str, found: int, expected: int = ABI_VERSION) -> None:
    """Raises ImportError unless the library's ABI version is the one this package speaks."""
    if found != expected:
        raise ImportError(
            f"jitcache: {os.fspath(path)} has C ABI version {found}, but this Python package "
            f"needs ABI version {expected}; install a matching libjitcache "
            f"(or point {ENV_LIBRARY} at one)"
        )


def load(path: os.PathLike[str] | str | None = None) -> tuple[ctypes.CDLL, Path]:
    """Loads, checks and declares the library; ImportError with the reason otherwise."""
    where = Path(path) if path is not None else default_library_path()
    if not where.exists():
        how = f"${ENV_LIBRARY}" if os.environ.get(ENV_LIBRARY, "").strip() else "the bundled copy"
        raise ImportError(
            f"jitcache: shared library {where} ({how}) does not exist; reinstall the package "
            f"or set {ENV_LIBRARY} to the path of libjitcache.so"
        )
    try:
        dll = ctypes.CDLL(os.fspath(where))
    except OSError as exc:
        raise ImportError(f"jitcache: cannot load {where}: {exc}") from exc
    try:
        abi = dll.jitcache_abi_version
    except AttributeError as exc:
        raise ImportError(
            f"jitcache: {where} is not libjitcache (no jitcache_abi_version symbol)"
        ) from exc
    abi.restype = c_uint32
    abi.argtypes = []
    check_abi(where, int(abi()))
    missing = []
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(dll, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(
            f"jitcache: {where} (ABI version {ABI_VERSION}) lacks {', '.join(missing)}; "
            "it is older than this Python package"
        )
    return dll, where


lib, library_path = load()


def last_error() -> str:
    """The calling thread's last library error message."""
    raw = lib.jitcache_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


def check(status: int) -> None:
    """Raises the :class:`jitcache.Error` subclass for a non-zero status, with the library's message."""
    if status:
        raise error_for(status, last_error())


def decode(raw: bytes | None) -> str:
    """A library-owned C string as str ("" for NULL)."""
    return raw.decode("utf-8", "replace") if raw else ""


def take_string(ptr: c_void_p) -> str:
    """Decodes a string the library returned through a ``char**`` and frees it."""
    address = ptr.value
    if not address:
        return ""
    try:
        return ctypes.string_at(address).decode("utf-8", "replace")
    finally:
        lib.jitcache_string_free(address)


def encode_path(name: str, value: os.PathLike[str] | str | bytes | None) -> bytes | None:
    """The path argument ``name`` as the NUL-terminated bytes the C ABI takes (None stays
    NULL). A NUL inside would cut the path short there without a word from the library, so
    it raises ValueError naming the argument, as Python's own file functions do."""
    if value is None:
        return None
    encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError(f"{name}: {os.fsdecode(encoded)!r} contains a NUL character")
    return encoded
