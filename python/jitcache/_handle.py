"""What every Python object that owns one of the library's handles shares."""

from __future__ import annotations

from typing import TypeVar

_Owner = TypeVar("_Owner", bound="HandleOwner")


class HandleOwner:
    """Owns one C handle in ``_handle`` (None once released); ``with`` closes it on exit.

    A subclass defines :meth:`close`, which sets ``_handle`` to None and releases it."""

    __slots__ = ()
    _handle: int | None

    def close(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self: _Owner) -> _Owner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
