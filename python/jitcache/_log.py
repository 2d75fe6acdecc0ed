"""Routes the library's log lines to the Python logger ``"jitcache"``.

The callback is installed on import of :mod:`jitcache` and stays alive in this module
until interpreter exit (when the library goes back to stderr). It may run on the library's
compile worker threads; ctypes takes the GIL for it, and it never raises.

Lines the Python logger would drop are dropped by the library first: its threshold
follows the logger's effective level, re-read before every call that may log
(:func:`sync`), so ``logging.getLogger("jitcache").setLevel(...)`` and pytest's ``caplog``
work without further calls. :func:`set_log_level` sets both at once.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os

from . import _lib

logger = logging.getLogger("jitcache")

_TO_PYTHON = {
    _lib.LOG_DEBUG: logging.DEBUG,
    _lib.LOG_INFO: logging.INFO,
    _lib.LOG_WARNING: logging.WARNING,
    _lib.LOG_ERROR: logging.ERROR,
}
_NAMES = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 1,
    "NONE": logging.CRITICAL + 1,
}


def _forward(_user_data: object, level: int, message: int | None, length: int) -> None:
    try:
        text = ctypes.string_at(message, length).decode("utf-8", "replace") if message else ""
        logger.log(_TO_PYTHON.get(level, logging.ERROR), text)
    except BaseException:  # noqa: BLE001 - an exception must never unwind into C
        pass


# Kept alive here: the library holds only its address.
_callback = _lib.LOG_FN(_forward)
_installed = False
_atexit_registered = False


def library_level(python_level: int) -> int:
    """The library threshold that lets through exactly the lines a Python level lets through."""
    if python_level <= logging.DEBUG:
        return _lib.LOG_DEBUG
    if python_level <= logging.INFO:
        return _lib.LOG_INFO
    if python_level <= logging.WARNING:
        return _lib.LOG_WARNING
    if python_level <= logging.ERROR:
        return _lib.LOG_ERROR
    return _lib.LOG_OFF


def python_level(level: int | str) -> int:
    """A level name ("DEBUG", "INFO", "WARNING", "ERROR", "OFF") or a logging int as a logging int."""
    if isinstance(level, bool):
        raise TypeError("log level: expected a name or a logging level int, got a bool")
    if isinstance(level, int):
        return level
    if isinstance(level, str):
        found = _NAMES.get(level.strip().upper())
        if found is not None:
            return found
        raise ValueError(
            f"log level: expected DEBUG, INFO, WARNING, ERROR or OFF, got {level!r}"
        )
    raise TypeError(f"log level: expected a name or a logging level int, got {type(level).__name__}")


def sync() -> None:
    """Sets the library threshold from the Python logger's current effective level."""
    effective = logger.getEffectiveLevel()
    disabled = logging.root.manager.disable
    if disabled:
        effective = max(effective, disabled + 1)
    _lib.lib.jitcache_set_log_level(library_level(effective))


def set_log_level(level: int | str) -> None:
    """Sets the ``"jitcache"`` logger's level and the library's threshold together."""
    value = python_level(level)
    logger.setLevel(value)
    _lib.check(_lib.lib.jitcache_set_log_level(library_level(value)))


def install() -> None:
    """Installs the bridge (idempotent). JITCACHE_LOG_LEVEL sets the logger's level if unset."""
    global _installed, _atexit_registered
    if _installed:
        return
    env = os.environ.get("JITCACHE_LOG_LEVEL", "").strip()
    if env and logger.level == logging.NOTSET:
        try:
            logger.setLevel(python_level(env))
        except (TypeError, ValueError):
            pass  # the library warns about a bad value when a runtime opens
    _lib.check(_lib.lib.jitcache_set_log_callback(_callback, None))
    _installed = True
    sync()
    if not _atexit_registered:
        atexit.register(uninstall)
        _atexit_registered = True


def uninstall() -> None:
    """Restores the library's default sink (stderr)."""
    global _installed
    if _installed:
        _lib.lib.jitcache_set_log_callback(_lib.LOG_FN(), None)  # NULL: stderr
        _installed = False
