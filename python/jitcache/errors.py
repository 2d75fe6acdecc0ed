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

# Every jitcache_status: its value, the name jitcache_status_name() gives it, and for each
# failure the class raised for it and what it means. The classes are made from this table.
_STATUSES: tuple[tuple[int, str, str, str], ...] = (
    (0, "JITCACHE_OK", "", ""),
    (1, "JITCACHE_ERROR_INVALID_ARGUMENT", "InvalidArgumentError",
     "A NULL or out-of-range argument, a bad layer, a released handle."),
    (2, "JITCACHE_ERROR_INVALID_INPUT", "InvalidInputError",
     "A file or value failed validation (a scales file, config.json, the environment)."),
    (3, "JITCACHE_ERROR_IO", "JitcacheIOError", "The operating system refused a read or write."),
    (4, "JITCACHE_ERROR_NOT_FOUND", "NotFoundError", "A named thing that must exist does not (a checkpoint, a file)."),
    (5, "JITCACHE_ERROR_UNSAFE", "UnsafeError",
     "Refused for safety: a symlink, a foreign owner, a path leaving the checkpoint."),
    (6, "JITCACHE_ERROR_COMPILE", "CompileError", "The compiler rejected a kernel."),
    (7, "JITCACHE_ERROR_DATABASE", "DatabaseError", "The cache index is unusable."),
    (8, "JITCACHE_ERROR_UNAVAILABLE", "UnavailableError", "No GPU or driver: launches and target detection."),
    (9, "JITCACHE_ERROR_INTERNAL", "InternalError", "An invariant did not hold inside the library (a bug)."),
    (10, "JITCACHE_ERROR_OUT_OF_MEMORY", "OutOfMemoryError", "The library could not allocate memory."),
)

# jitcache_status values and the names jitcache_status_name() gives them.
STATUS_NAMES: dict[int, str] = {status: name for status, name, _, _ in _STATUSES}


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


# One subclass of Error per failure status, under the names in __all__.
_CLASSES: dict[int, type[Error]] = {
    status: type(cls_name, (Error,), {"status": status, "__doc__": doc, "__module__": __name__})
    for status, _, cls_name, doc in _STATUSES
    if cls_name
}
globals().update({cls.__name__: cls for cls in _CLASSES.values()})


def error_for(status: int, message: str = "") -> Error:
    """The exception for a non-zero status (an unknown one gives a plain :class:`Error`)."""
    status = int(status)
    cls = _CLASSES.get(status)
    if cls is None:
        return Error(message, status)
    return cls(message)
