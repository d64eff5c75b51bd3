"""Expand command-line paths into an ordered list of inputs.

Folders are walked recursively in sorted order without following folder symlinks.
Rotated sets (``x.log``, ``x.log.1``, ``x.log.2.gz``, ``x.log-20250101``) are grouped and
ordered oldest first, so a group reads as one continuous stream. Whatever cannot be
listed (missing path, broken symlink, symlink loop) becomes a :class:`Problem`, never an
exception.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from diag.sources.info_sniff import INFO_SNIFF_BYTES, sniff_server_info
from diag.sources.trace_sniff import SNIFF_BYTES, looks_like_trace, trace_by_name

STDIN = "-"

# our own outputs and obvious non-logs met while walking a folder (named files are always read)
_IGNORED_SUFFIXES = (".graphdiag.html", ".graphdiag.json", ".graphdiag.yaml")
NOT_LOG_SUFFIXES = (
    ".md",
    ".yaml",
    ".yml",
    ".json",
    ".py",
    ".html",
    ".htm",
    ".csv",
    ".toml",
    ".ini",
    ".cfg",
    ".png",
    ".jpg",
    ".jpeg",
    ".svg",
    ".sh",
    ".parquet",
    ".ipynb",
)
_ROTATION = re.compile(r"^(?P<base>.+?)(?:\.(?P<num>\d{1,4})|-(?P<date>\d{8}(?:\d{2,6})?))?$")


@dataclass(frozen=True)
class InputFile:
    """One file to read; ``group`` joins the parts of a rotated set."""

    path: str  # as shown to the user
    fs_path: Path | None  # None for stdin
    group: str
    order: int  # 0 = oldest part of the group


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str


def rotation_key(name: str) -> tuple[str, tuple[int, int]]:
    """(base name, sort key) of a file name; the live file sorts after its rotations."""
    if name.endswith(".gz"):
        name = name[:-3]
    m = _ROTATION.match(name)
    if not m:
        return name, (2, 0)
    if m.group("num") is not None:
        # x.log.1 is newer than x.log.2: larger numbers are older -> sort first
        return m.group("base"), (0, -int(m.group("num")))
    if m.group("date") is not None:
        return m.group("base"), (1, int(m.group("date")))
    return m.group("base"), (2, 0)


def _check_file(path: Path) -> str | None:
    """Why a listed file cannot be read, or None."""
    try:
        st = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        if path.is_symlink():
            return "broken symlink"
        if exc.errno == errno.EACCES:
            return "permission denied"
        return exc.strerror or "cannot stat"
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not os.access(path, os.R_OK):
        return "permission denied"
    return None


def _walk(root: Path, problems: list[Problem] | None = None) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if problems is not None:
            for d in dirnames:
                if os.path.islink(os.path.join(dirpath, d)):
                    problems.append(
                        Problem(os.path.join(dirpath, d), "symlink to a folder, not followed")
                    )
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith(_IGNORED_SUFFIXES):
                continue
            yield Path(dirpath) / name


def discover(paths: Sequence[str]) -> tuple[list[InputFile], list[Problem]]:
    """The inputs named by ``paths`` in reading order, and what could not be listed."""
    files: list[Path] = []
    problems: list[Problem] = []
    stdin_seen = False
    seen: set[str] = set()
    for raw in paths:
        if raw == STDIN:
            stdin_seen = True
            continue
        p = Path(raw)
        reason = _check_file(p)
        if reason is not None:
            problems.append(
                Problem(raw, reason if p.exists() or p.is_symlink() else "no such file or folder")
            )
            continue
        candidates = list(_walk(p, problems)) if p.is_dir() else [p]
        if p.is_dir() and not candidates:
            some = any(names for _, _, names in os.walk(p))
            empty = "only hidden files or graphdiag's own reports" if some else "no files in it"
            problems.append(Problem(raw, f"empty folder: {empty}"))
        for c in candidates:
            if p.is_dir() and c.name.lower().endswith(NOT_LOG_SUFFIXES) and not _json_input(c):
                problems.append(Problem(str(c), f"not a log ({c.suffix} file in a folder)"))
                continue
            key = os.path.normpath(str(c))
            if key in seen:
                continue
            seen.add(key)
            why = _check_file(c)
            if why is not None:
                problems.append(Problem(str(c), why))
            else:
                files.append(c)
    out = _order(files)
    if stdin_seen:
        out.append(InputFile(STDIN, None, STDIN, 0))
    return out, problems


def _json_input(path: Path) -> bool:
    """A plain ``.json`` in a folder is read when it is a torch-profiler trace, by name or by
    its first KB, or an engine's server-info document, by its first keys."""
    if not path.name.lower().endswith(".json"):
        return False
    if trace_by_name(str(path)):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(INFO_SNIFF_BYTES)
    except OSError:
        return False
    return looks_like_trace(head[:SNIFF_BYTES]) or sniff_server_info(head) is not None


def _order(files: list[Path]) -> list[InputFile]:
    groups: dict[str, list[tuple[tuple[int, int], Path]]] = {}
    first_seen: dict[str, int] = {}
    for i, f in enumerate(files):
        base, key = rotation_key(f.name)
        gid = str(f.parent / base)
        groups.setdefault(gid, []).append((key, f))
        first_seen.setdefault(gid, i)
    out: list[InputFile] = []
    for gid in sorted(groups, key=lambda g: (first_seen[g], g)):
        members = sorted(groups[gid], key=lambda kv: kv[0])
        for order, (_, f) in enumerate(members):
            out.append(InputFile(str(f), f, gid, order))
    return out
