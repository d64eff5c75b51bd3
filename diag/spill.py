"""Values kept on disk while an analysis holds many: a fleet's runs in bounded memory.

An analysis of 10,000 pod logs holds every run from its reading until its report is
written (advice pools runs of one server across the fleet), and each run's facts, advice and
recommendation are ~50-100 KB of Python objects. :class:`Held` keeps the values read last
as they are and spills the others: :func:`spill` zlib-pickles a value into an anonymous
temporary file (the system deletes it when it is closed, even when the process is killed)
and gives back a :class:`Spilled` handle of a few dozen bytes that reads it back. The file is emptied when its last handle is let go. Where no temporary file
can be made (a read-only or full disk) the packed bytes stay in memory: never lost.
Only what this process pickled is ever unpickled: the file has no name, nothing else can
open it (no input file meets ``pickle.loads`` here).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import IO, Any, ClassVar, Generic, TypeVar, overload

T = TypeVar("T")


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


#: values held as they are; beyond, the least recently read are spilled (a fleet of 10,000
#: pod logs held ~0.1 MB of Python objects a run while it was read, more until written)
LIVE = 64


class Held(Generic[T]):
    """A value kept as it is while it is among the :data:`LIVE` bounded values read last,
    else spilled and read back on use. A value is bounded from the start or from
    :meth:`bound` (a run's report while it is judged stays whole). A value read back is the
    state spilled; :meth:`set` replaces it. With ``reload`` (the value is kept elsewhere
    already, e.g. packed) it is let go without spilling and read back by ``reload()``."""

    # the bounded holders whose values are in memory, least recently read first
    _live: ClassVar[OrderedDict[int, weakref.ref[Held[Any]]]] = OrderedDict()

    __slots__ = ("__weakref__", "_value", "_spilled", "_bounded", "_reload")

    def __init__(
        self, value: T, *, bounded: bool = True, reload: Callable[[], T] | None = None
    ) -> None:
        self._value: T | None = value
        self._spilled: Spilled | None = None
        self._bounded = bounded
        # gives the value again where it is kept elsewhere already (let go, not spilled)
        self._reload = reload
        self._touch()

    def get(self) -> T:
        value = self._value
        if value is None:
            if self._reload is not None:
                value = self._value = self._reload()
            else:
                assert self._spilled is not None
                value = self._value = self._spilled.load()
        self._touch()
        return value

    @property
    def holds(self) -> bool:
        """Is the value in memory (reading it reloads nothing)?"""
        return self._value is not None

    def set(self, value: T) -> None:
        self._value, self._spilled, self._reload = value, None, None
        self._touch()

    def bound(self) -> None:
        """From now on the value may be spilled."""
        self._bounded = True
        self._touch()

    def _touch(self) -> None:
        if not self._bounded:
            return
        live, key = Held._live, id(self)
        if key in live:
            live.move_to_end(key)
            return
        live[key] = weakref.ref(self, lambda _, k=key: live.pop(k, None))  # type: ignore[misc]
        while len(live) > LIVE:
            oldest = live.popitem(last=False)[1]()
            if oldest is not None:
                oldest._let_go()

    def _let_go(self) -> None:
        if self._spilled is None and self._reload is None and self._value is not None:
            self._spilled = spill(self._value)
        self._value = None

    def __getstate__(self) -> tuple[T, bool]:
        return self.get(), self._bounded

    def __setstate__(self, state: tuple[T, bool]) -> None:
        self._value, self._spilled, self._bounded = state[0], None, state[1]
        self._reload = None
        self._touch()


class ReadOnAsk(Sequence[T]):
    """``n`` items, item ``i`` read by ``read(i)`` each time it is asked for: a fleet's held
    runs walked without ever being all in memory at once."""

    def __init__(self, n: int, read: Callable[[int], T]) -> None:
        self._n, self._read = n, read

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._read(k) for k in range(self._n)[i]]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._read(i % self._n)
