"""jitcache: NVFP4 MLA KV-cache kernels, compiled and cached, with per-layer outer scales.

Binds libjitcache's C ABI with ctypes. ``jitcache.host`` needs numpy; ``jitcache.torch``
and ``jitcache.vllm`` need torch. Importing this package needs neither.
"""

from __future__ import annotations

from . import _lib, _log
from . import errors as _errors
from . import runtime as _runtime
from .errors import (
    CompileError,
    DatabaseError,
    Error,
    InternalError,
    InvalidArgumentError,
    InvalidInputError,
    JitcacheIOError,
    NotFoundError,
    OutOfMemoryError,
    UnavailableError,
    UnsafeError,
    error_for,
)
from .runtime import (
    CacheInfo,
    CompiledKernel,
    DeviceInfo,
    KernelInfo,
    KernelLookup,
    LayerInfo,
    Model,
    PrepareStats,
    Provenance,
    ResolvedScales,
    Runtime,
    RuntimeStats,
    VariantCoverage,
    resolve_scales,
)

_log.install()

# The loaded library's version: the CMake project version the package is built from too.
__version__: str = _lib.decode(_lib.lib.jitcache_version())


def abi_version() -> int:
    """The C ABI version of the loaded library (this package needs 1)."""
    return int(_lib.lib.jitcache_abi_version())


def library_version() -> str:
    """The loaded library's version string, e.g. "0.1.0"."""
    return _lib.decode(_lib.lib.jitcache_version())


def library_path() -> str:
    """The path of the loaded libjitcache shared library."""
    return str(_lib.library_path)


def set_log_level(level: int | str) -> None:
    """Sets the "jitcache" logger's level and the library's threshold:
    "DEBUG", "INFO", "WARNING", "ERROR", "OFF", or a logging level int."""
    _log.set_log_level(level)


__all__ = [
    "__version__",
    "abi_version",
    "library_version",
    "library_path",
    "set_log_level",
    *_runtime.__all__,
    *(name for name in _errors.__all__ if name != "STATUS_NAMES"),
]
