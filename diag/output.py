"""Atomic output: reports are written to temporary files beside their targets and renamed,
so an interrupted run never leaves a half-written report, and the files of one analysis
(its JSON and HTML) appear together or not at all.

A folder that cannot be written (read-only, a path through a file, a full disk) is one
:class:`WriteError` naming the folder and the system's reason; nothing partial is left.
Temporaries of earlier runs that were killed (SIGKILL leaves them) are removed by the next
run writing into that folder.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

#: a temporary's name: ``.<target>.<pid>.<random>.tmp`` (the pid tells a live writer's)
_TMP = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")
#: temporaries named by older versions (no pid) count as stale after this long
STALE_AFTER_S = 600.0


class WriteError(OSError):
    """A report could not be written; the message is one line for the user."""


class InterruptedWrite(KeyboardInterrupt):
    """A signal arrived while the set was written: ``written`` is what exists (all of the
    set, or nothing)."""

    def __init__(self, written: Sequence[Path]) -> None:
        super().__init__("interrupted")
        self.written = list(written)


#: what a file gets: its text or bytes, or its text in pieces made as they are written (a
#: fleet's report is never whole in memory)
Content = str | bytes | Iterable[str]


def write_atomic(path: Path, data: Content) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a mix."""
    write_set([(path, data)])


def write_set(
    files: Sequence[tuple[Path, Content]], check: Callable[[], None] | None = None
) -> list[Path]:
    """Write every file, all or none: each to a temporary beside its target (flushed to
    disk), then, with SIGINT/SIGTERM held back, all renamed. ``check`` (raising
    KeyboardInterrupt if a signal was seen) runs before the renames. A signal during the
    renames is delivered once they are all done: :class:`InterruptedWrite` then lists the
    files, which exist whole. A write error removes every temporary and every file already
    renamed, and raises :class:`WriteError`."""
    temps: list[tuple[str, Path]] = []
    renamed: list[Path] = []
    try:
        for path, data in files:
            temps.append((_write_temp(path, data), path))
        if check is not None:
            check()
        with _signals_held() as pending:
            try:
                for tmp, path in temps:
                    os.replace(tmp, path)
                    renamed.append(path)
            except OSError as exc:
                for path in renamed:
                    _unlink(str(path))
                renamed.clear()
                raise WriteError(_say(exc, path)) from None
        if pending:
            raise InterruptedWrite(renamed)
        return renamed
    except BaseException:
        for tmp, _ in temps:
            _unlink(tmp)
        raise


def _write_temp(path: Path, data: Content) -> str:
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale(folder)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise WriteError(_say(exc, path)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            # mkstemp makes the file 0600; a report gets the mode any new file would get
            # (or keeps the one of the report it replaces), so others can still read it
            os.fchmod(fh.fileno(), _mode_for(path))
            for piece in [data] if isinstance(data, str | bytes) else data:
                fh.write(piece.encode("utf-8") if isinstance(piece, str) else piece)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        _unlink(tmp)
        if isinstance(exc, OSError):
            raise WriteError(_say(exc, path)) from None
        raise
    return tmp


def remove_stale(folder: Path) -> list[str]:
    """Remove the temporaries that killed runs left in ``folder`` (their writer is gone, or,
    without a pid in the name, they are older than :data:`STALE_AFTER_S`)."""
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _TMP.match(name) if name.startswith(".") and name.endswith(".tmp") else None
        if m is None or not m.group("target").endswith((".html", ".json")):
            continue
        full = os.path.join(folder, name)
        if _alive(int(m.group("pid"))):
            continue
        removed.append(full)
        _unlink(full)
    for name in names:  # the older naming, ``.<target>.<random>.tmp``
        if _TMP.match(name) or not re.match(r"^\..+\.(html|json)\.[A-Za-z0-9_]+\.tmp$", name):
            continue
        full = os.path.join(folder, name)
        try:
            if time.time() - os.stat(full).st_mtime > STALE_AFTER_S:
                removed.append(full)
                _unlink(full)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's live process
    return True


class _signals_held:  # noqa: N801 - used as a context manager
    """SIGINT/SIGTERM held back: while inside, they are recorded in ``pending`` by handlers
    of their own, the old handlers put back on exit. (Not a signal mask: a mask blocks them
    for the main thread only, and a process-directed signal then goes to another thread,
    whose flag Python acts on in the main thread all the same.) Outside the main thread,
    where handlers cannot be set, nothing is held."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._old: dict[int, Any] = {}

    def __enter__(self) -> list[int]:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._record)
            except ValueError:  # not the main thread
                break
        return self.pending

    def _record(self, signum: int, _frame: object) -> None:
        self.pending.append(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _say(exc: OSError, path: Path) -> str:
    reason = exc.strerror or str(exc)
    for folder in path.parents:  # a file where a folder should be: say which
        if folder.exists() and not folder.is_dir():
            reason = f"{folder} is a file, not a folder"
            break
    return f"cannot write {path}: {reason}"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _mode_for(path: Path) -> int:
    """Permission bits for the new report at ``path``."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0o022)  # reading the umask means setting it; put it straight back
        os.umask(umask)
        return 0o666 & ~umask
