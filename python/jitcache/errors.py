"""Exceptions: one class per jitcache_status, all under :class:`Error`."""

from __future__ import annotations

__all__ = [
    "Error",
    "InvalidArgumentError",
    "InvalidInputError",
    "JitcacheIOError",
    "NotFoundError",
    "UnsafeError",
    "CompileError",
    "DatabaseError",
    "UnavailableError",
    "InternalError",
    "OutOfMemoryError",
    "error_for",
    "STATUS_NAMES",
]

# jitcache_status values and the names jitcache_status_name() gives them.
STATUS_NAMES: dict[int, str] = {
    0: "JITCACHE_OK",
    1: "JITCACHE_ERROR_INVALID_ARGUMENT",
    2: "JITCACHE_ERROR_INVALID_INPUT",
    3: "JITCACHE_ERROR_IO",
    4: "JITCACHE_ERROR_NOT_FOUND",
    5: "JITCACHE_ERROR_UNSAFE",
    6: "JITCACHE_ERROR_COMPILE",
    7: "JITCACHE_ERROR_DATABASE",
    8: "JITCACHE_ERROR_UNAVAILABLE",
    9: "JITCACHE_ERROR_INTERNAL",
    10: "JITCACHE_ERROR_OUT_OF_MEMORY",
}


class Error(Exception):
    """A failed jitcache call. ``status`` is the C status code, ``message`` the library's text."""

    status: int = -1

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, "JITCACHE_ERROR_UNKNOWN")

    def __str__(self) -> str:
        return self.message or self.status_name


class InvalidArgumentError(Error):
    """A NULL or out-of-range argument, a bad layer, a released handle."""

    status = 1


class InvalidInputError(Error):
    """A file or value failed validation (a scales file, config.json, the environment)."""

    status = 2


class JitcacheIOError(Error):
    """The operating system refused a read or write."""

    status = 3


class NotFoundError(Error):
    """A named thing that must exist does not (a checkpoint, a file)."""

    status = 4


class UnsafeError(Error):
    """Refused for safety: a symlink, a foreign owner, a path leaving the checkpoint."""

    status = 5


class CompileError(Error):
    """The compiler rejected a kernel."""

    status = 6


class DatabaseError(Error):
    """The cache index is unusable."""

    status = 7


class UnavailableError(Error):
    """No GPU or driver: launches and target detection."""

    status = 8


class InternalError(Error):
    """An invariant did not hold inside the library (a bug)."""

    status = 9


class OutOfMemoryError(Error):
    """The library could not allocate memory."""

    status = 10


_CLASSES: dict[int, type[Error]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        InvalidInputError,
        JitcacheIOError,
        NotFoundError,
        UnsafeError,
        CompileError,
        DatabaseError,
        UnavailableError,
        InternalError,
        OutOfMemoryError,
    )
}


def error_for(status: int, message: str = "") -> Error:
    """The exception for a non-zero status (an unknown one gives a plain :class:`Error`)."""
    status = int(status)
    cls = _CLASSES.get(status)
    if cls is None:
        return Error(message, status)
    return cls(message)
