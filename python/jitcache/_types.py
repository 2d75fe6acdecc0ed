"""Types the package's modules share."""

from __future__ import annotations

import os
from typing import TypeVar, Union

# A file or directory argument: a str or any os.PathLike.
PathArg = Union[str, "os.PathLike[str]"]

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
