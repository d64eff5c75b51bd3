"""Worker processes that never outlive their parent, and a worker count that stays bounded.

A worker dies with the process that started it, even when that process is killed with
SIGKILL and gets no chance to clean up:

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the worker, so the kernel kills it when its
  parent thread exits (the pool is started from the main thread);
* everywhere: a watchdog thread in the worker. With ``fork`` it blocks on the read end of a
  pipe whose only write end the parent holds, and sees EOF the moment the parent is gone;
  with other start methods it checks every half second that the parent still runs;
* a parent that died before the worker set this up is caught by the parent pid check.

A scan worker also keeps pyarrow from importing pandas, which it never uses
(:func:`arrow_without_pandas`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def bounded_jobs(requested: int, segments: int) -> int:
    """Never more workers than cores or than segments to scan."""
    return max(1, min(requested, cores(), segments))


class Leash:
    """The parent's side: a pipe whose write end only the parent keeps."""

    def __init__(self) -> None:
        self.parent_pid = os.getpid()
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.read_fd, True)

    def initargs(self, inherits_fds: bool) -> tuple[int, int, int]:
        if inherits_fds:
            return self.parent_pid, self.read_fd, self.write_fd
        return self.parent_pid, -1, -1

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def die_with_parent(parent_pid: int, read_fd: int, write_fd: int) -> None:
    """In a worker: make sure it ends when ``parent_pid`` does."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass
    forked = read_fd >= 0
    if forked:
        try:
            os.close(write_fd)  # else EOF never comes
        except OSError:
            pass
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
    threading.Thread(
        target=_watch_pipe if forked else _watch_pid,
        args=(read_fd,) if forked else (parent_pid,),
        name="graphdiag-watchdog",
        daemon=True,
    ).start()


def _watch_pipe(read_fd: int) -> None:
    try:
        while os.read(read_fd, 1):
            pass
    except OSError:
        pass
    os._exit(1)


def _watch_pid(parent_pid: int) -> None:
    while _alive(parent_pid):
        time.sleep(_POLL_SECONDS)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed parent is a zombie until reaped: it still "exists"
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return True


class _NoPandas:
    """A meta path finder that says pandas is not there."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("not in a scan worker", name=name)


def arrow_without_pandas() -> None:
    """pyarrow asks on its first ``pa.array`` whether pandas imports (to tell a pandas Series
    from other array-likes) and imports it: ~0.2 s of CPU in each scan worker, which never
    hands it a pandas object and was forked before the parent loaded pandas
    (``diag.pipeline.LATER_STAGES``). Its probe is answered "no" here; pyarrow imports pandas
    after all where a pandas conversion is asked for, and a worker's own ``import pandas``
    works as ever."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa  # (loaded already: the scanners use it)

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # the probe, made while pandas cannot be found
    finally:
        sys.meta_path.remove(finder)
