"""Cut the inputs into groups that can be analysed alone and give the same runs.

A run never spans two rotated sets (``diag.facts.runs``: one stream is one rotated set,
the ranks of a server print into it), so a rotated set is the smallest unit. What joins
units is a file that is not a log (:func:`join_scope`): a server-info document or a
``/metrics`` dump joins a log in its own folder (``diag.facts.runs``), so it is grouped
with the log units there; a snapshot, profiler table or trace is joined to the run whose
logs share its deepest folder (``diag.facts.joins``), so it is grouped with every log unit
at that depth (or, planned with ``defer``, read apart and joined after every group when
those logs span several batches: one trace at a fleet's root would make the fleet one
group). Any other file that does not sniff as a plain log is treated as an artifact
(when unsure keep files together: a wrong split changes verdicts). Groups are then
widened to contiguous ranges of the reading order, so concatenating the groups' results in
order is the order of one pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from diag.sources.discover import STDIN, InputFile, Problem, discover
from diag.sources.readers import open_binary, read_head, sniff
from diag.sources.trace_sniff import trace_by_name


@dataclass(frozen=True)
class InputGroup:
    """Files read together (whole rotated sets, in reading order)."""

    files: tuple[InputFile, ...]
    #: an artifact read apart from the logs it may join (:func:`plan_groups` ``defer``)
    deferred: bool = False
    joins: tuple[str, ...] = ()  # deferred: the logs it may join (paths)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def bytes(self) -> int:
        return sum(_size(f) for f in self.files)


@dataclass(frozen=True)
class GroupPlan:
    """What discovery could not list, and the groups of what it could."""

    problems: tuple[Problem, ...]
    groups: tuple[InputGroup, ...]

    @property
    def files(self) -> int:
        return sum(len(g.files) for g in self.groups)


#: consecutive groups are read together up to this many files or bytes: each read has a
#: fixed cost (building the event frames, ~25 ms), paid per batch instead of per pod log
BATCH_FILES = 200
BATCH_BYTES = 64 << 20


def plan_groups(
    paths: Sequence[str],
    max_files: int | None = None,
    max_bytes: int | None = None,
    defer: bool = False,
) -> GroupPlan:
    """Discover ``paths`` and cut the files into independent groups, consecutive small
    groups batched (independent groups read together give each the runs it gives alone;
    None: :data:`BATCH_FILES` / :data:`BATCH_BYTES`). ``defer``: an artifact that would join
    logs of several batches (a trace at a fleet's root, beside every pod's folder) is a
    group of its own, marked ``deferred``: its reader joins it to its run after reading
    every batch (:mod:`diag.facts.deferred`), so the fleet is not read as one group."""
    files, problems = discover(paths)
    groups = batched(group_files(files, defer), max_files or BATCH_FILES, max_bytes or BATCH_BYTES)
    return GroupPlan(tuple(problems), tuple(_rejoined(groups)))


def _rejoined(groups: list[InputGroup]) -> list[InputGroup]:
    """Each deferred artifact put back into the batch beside it when that batch holds every
    log it may join (nothing to defer: the batch joins it as one pass would)."""
    out = list(groups)
    k = 0
    while k < len(out):
        g = out[k]
        for n in (k - 1, k + 1) if g.deferred else ():
            if 0 <= n < len(out) and not out[n].deferred and set(g.joins) <= set(out[n].paths):
                out[min(n, k)] = InputGroup(out[min(n, k)].files + out[max(n, k)].files)
                del out[max(n, k)]
                k = -1  # again from the start: a deferred group may now border a batch
                break
        k += 1
    return out


def batched(groups: Sequence[InputGroup], max_files: int, max_bytes: int) -> list[InputGroup]:
    """Consecutive groups joined while the batch stays within ``max_files`` / ``max_bytes``
    (a group larger than that is a batch of its own). A deferred group stays in its batch
    when the batch holds every log it may join, else the batch is cut around it."""
    out: list[InputGroup] = []
    batch: list[InputGroup] = []
    count = size = 0
    for g in groups:
        n, b = len(g.files), g.bytes
        if batch and (count + n > max_files or size + b > max_bytes):
            out.extend(_cut(batch))
            batch, count, size = [], 0, 0
        batch.append(g)
        count += n
        size += b
    if batch:
        out.extend(_cut(batch))
    return out


def _cut(batch: list[InputGroup]) -> list[InputGroup]:
    """One batch as one group, or cut around its deferred groups that join beyond it."""
    paths = {f.path for g in batch for f in g.files}
    out: list[InputGroup] = []
    files: list[InputFile] = []
    for g in batch:
        if g.deferred and not set(g.joins) <= paths:
            if files:
                out.append(InputGroup(tuple(files)))
                files = []
            out.append(g)
        else:
            files.extend(g.files)
    if files:
        out.append(InputGroup(tuple(files)))
    return out


def group_files(files: Sequence[InputFile], defer: bool = False) -> list[InputGroup]:
    """Independent groups of ``files`` (discovery order kept, rotated sets whole).
    ``defer``: an artifact alone in its unit that would join log units of several groups,
    and that does not sit inside another group's range of the reading order, is a group of
    its own, ``deferred``, naming the logs it may join."""
    units: list[list[InputFile]] = []
    for f in files:
        if units and units[-1][0].group == f.group:
            units[-1].append(f)
        else:
            units.append([f])
    if any(f.fs_path is None for f in files):  # stdin is read in this process, with the rest
        return [InputGroup(tuple(files))] if files else []
    parent = list(range(len(units)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    scopes = [[join_scope(f) for f in u] for u in units]
    logs = [i for i, s in enumerate(scopes) if all(x == "log" for x in s)]
    folders = {i: [_folder(f) for f in units[i]] for i in logs}
    nearest: dict[int, list[int]] = {}  # single-artifact units: the log units they join
    for i, unit in enumerate(units):
        if i in folders:
            continue
        for f, scope in zip(unit, scopes[i], strict=True):
            if scope == "folder":
                here = _folder(f)
                joins = [j for j, theirs in folders.items() if here in theirs]
            else:
                joins = _nearest_units(_folder(f), folders)
                if defer and len(unit) == 1:
                    nearest[i] = joins
                    continue
            for j in joins:
                parent[find(j)] = find(i)
    # an artifact that joins units of one group joins that group; one that would join
    # several is deferred, unless it sits inside another group's range (then joined)
    deferred = {i for i, joins in nearest.items() if len({find(j) for j in joins}) > 1}
    for i in set(nearest) - deferred:
        for j in nearest[i]:
            parent[find(j)] = find(i)
    while True:
        spans = [(a, b) for a, b in _ranges(len(units), find) if b - a > 1]
        inside = [i for i in deferred if any(a <= i < b for a, b in spans)]
        if not inside:
            break
        for i in inside:
            deferred.discard(i)
            for j in nearest[i]:
                parent[find(j)] = find(i)
    out: list[InputGroup] = []
    for start, stop in _ranges(len(units), find):
        files_here = tuple(f for u in units[start:stop] for f in u)
        if stop - start == 1 and start in deferred:
            names = tuple(f.path for j in nearest[start] for f in units[j])
            out.append(InputGroup(files_here, deferred=True, joins=names))
        else:
            out.append(InputGroup(files_here))
    return out


def _ranges(n: int, find: Callable[[int], int]) -> list[tuple[int, int]]:
    """Each group widened to the range of reading order it spans, cut at the gaps."""
    end_of: dict[int, int] = {}
    for i in range(n):
        end_of[find(i)] = i
    out: list[tuple[int, int]] = []
    start, reach = 0, -1
    for i in range(n):
        reach = max(reach, end_of[find(i)])
        if i == reach:
            out.append((start, i + 1))
            start = i + 1
    return out


def _nearest_units(folder: str, folders: dict[int, list[str]]) -> list[int]:
    """The log units whose files share the deepest folder with ``folder`` (all at that
    depth: which of them wins is decided by the runs, after reading)."""
    best, chosen = -1, []
    mine = _parts(folder)
    for j, theirs in folders.items():
        depth = max(_shared(mine, _parts(d)) for d in theirs)
        if depth > best:
            best, chosen = depth, [j]
        elif depth == best:
            chosen.append(j)
    return chosen


@functools.lru_cache(maxsize=4096)
def _parts(folder: str) -> tuple[str, ...]:
    return Path(folder).parts


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """``len(Path(os.path.commonpath([a, b])).parts)`` of two resolved folders given by their
    parts: their common leading parts (a pickle beside 1,000 pod logs asked ``commonpath``
    1,000 times, ~10 us each)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _folder(f: InputFile) -> str:
    return str(Path(f.path).parent.resolve())


#: what a file can join: ``log`` nothing (a text log is read into runs of its own stream),
#: ``folder`` a log in its own folder (a server-info document, a /metrics dump: the
#: companions of ``diag.facts.runs``), ``nearest`` the logs sharing its deepest folder
JoinScope = Literal["log", "folder", "nearest"]


def join_scope(f: InputFile) -> JoinScope:
    """What ``f`` may join, from its first bytes as the ingest sniffs them (a JSON document
    that is not a server-info document may be read as a trace: ``nearest``)."""
    if f.path == STDIN or f.path.lower().endswith((".pickle", ".pkl", ".pickle.gz", ".pkl.gz")):
        return "nearest"
    try:
        with open_binary(f) as stream:
            head, _ = read_head(stream)
    except OSError:
        return "log"  # unreadable: skipped with its reason, joins nothing
    kind = sniff(head, compressed=False, backend=False).kind
    if kind in ("server_info", "metrics"):
        return "folder"
    return "log" if kind == "log" and not _may_be_trace(f.path, head) else "nearest"


def _may_be_trace(path: str, head: bytes) -> bool:
    """A JSON document (not JSON lines) or a trace's name: the ingest may read it as a
    profiler trace (``diag.ingest.inputs``). A log line's ``[2025-...`` is not JSON."""
    if trace_by_name(path):
        return True
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"[":
        text = text[1:].lstrip()
        return text[:1] in (b"{", b"[", b"]", b"")
    return text[:1] == b"{" and head.count(b"\n{") < 3


def _size(f: InputFile) -> int:
    try:
        return f.fs_path.stat().st_size if f.fs_path is not None else 0
    except OSError:
        return 0
