"""Values kept on disk while a report holds many: a fleet's runs in bounded memory.

A report of 10,000 pod logs holds every run until its outputs are written, and each run's
facts, advice and recommendation are ~40 KB of Python objects. :func:`spill` zlib-pickles a
value into an anonymous temporary file (the system deletes it when it is closed, even when
the process is killed) and gives back a :class:`Spilled` handle of a few dozen bytes that
reads it back. The file is emptied when its last handle is let go. Where no temporary file
can be made (a read-only or full disk) the packed bytes stay in memory: never lost.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zlib
from typing import IO, Any


class _Store:
    """One process's spill file: appended to, read by offset, emptied when unreferenced."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # a forked child writes a file of its own
        self.file: IO[bytes] | None = None
        self.end = 0
        self.refs = 0

    def put(self, data: bytes) -> int | None:
        """Append ``data``: its offset, or None where there is no file to hold it."""
        try:
            if self.file is None:
                self.file = tempfile.TemporaryFile()
            os.pwrite(self.file.fileno(), data, self.end)
        except OSError:
            return None
        offset, self.end = self.end, self.end + len(data)
        self.refs += 1
        return offset

    def get(self, offset: int, size: int) -> bytes:
        assert self.file is not None
        return os.pread(self.file.fileno(), size, offset)

    def release(self) -> None:
        self.refs -= 1
        if (
            self.refs == 0
            and self.file is not None
            and not self.file.closed
            and self.pid == os.getpid()
        ):
            self.file.truncate(0)
            self.end = 0


_stores: dict[int, _Store] = {}


def _store() -> _Store:
    pid = os.getpid()
    if pid not in _stores:
        _stores[pid] = _Store()
    return _stores[pid]


class Spilled:
    """One value written away: :meth:`load` gives a copy back (each call a fresh one)."""

    __slots__ = ("_store", "_offset", "_size", "_data")

    def __init__(self, value: Any) -> None:
        data = zlib.compress(pickle.dumps(value, protocol=5), 1)
        self._store = _store()
        self._size = len(data)
        self._offset = self._store.put(data)
        self._data = data if self._offset is None else None

    def load(self) -> Any:
        data = self._data
        if data is None:
            assert self._offset is not None
            data = self._store.get(self._offset, self._size)
        return pickle.loads(zlib.decompress(data))

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return (spill, (self.load(),))  # another process spills it into a file of its own

    def __del__(self) -> None:
        if self._offset is not None:
            self._store.release()


def spill(value: Any) -> Spilled:
    """``value`` written away (it must pickle); ``.load()`` reads it back."""
    return Spilled(value)
