"""The groups as Dask tasks: ``graphdiag analyze --cluster ADDRESS|local[:N]``.

Each group (:mod:`diag.sources.groups`) is read by one task into its compact facts
(:class:`diag.pipeline.GroupFacts`, no event tables); the client judges them as a
local run does (:func:`diag.pipeline.judge_groups`), and the evidence lines findings
cite are read back by tasks too, where the files are. With ``on_workers`` every worker
lists the paths itself (globs, ``$VARS`` and ``~`` expanded there) and reads them in tasks
pinned to it, its paths shown as ``<worker name>:<path>``. A group whose task failed or
whose worker was lost is listed with its inputs skipped and the reason; the rest completes.
Dask is optional (``pip install 'graphdiag[cluster]'``).
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from diag.evidence import read_all
from diag.ingest import StageFn
from diag.model import InputStatus
from diag.pipeline import GroupFacts, judge_groups, read_group
from diag.report import Report
from diag.sources.discover import InputFile, Problem
from diag.sources.groups import GroupPlan, InputGroup, plan_groups

INSTALL_HINT = "--cluster needs Dask: pip install 'graphdiag[cluster]'"
POLL_S = 0.2


class ClusterUnavailable(RuntimeError):
    """Dask is not installed, or the scheduler cannot be reached (one line says which)."""


@dataclass
class Connection:
    client: Any  # distributed.Client
    cluster: Any = None  # the LocalCluster started for ``local[:N]``

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def connect(address: str) -> Connection:
    """A client of the scheduler at ``address``, or of a LocalCluster of N worker processes
    on the loopback for ``local[:N]`` (N: the cores, at least 2)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ClusterUnavailable(INSTALL_HINT) from None
    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2]
        if count and not count.isdigit() or count == "0":
            raise ClusterUnavailable(f"--cluster {address}: N of local:N is a worker count")
        n = int(count) if count else max(2, os.cpu_count() or 2)
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        return Connection(Client(cluster), cluster)
    try:
        return Connection(Client(address, timeout="20s"))
    except (OSError, TimeoutError) as exc:
        raise ClusterUnavailable(f"--cluster {address}: no Dask scheduler there ({exc})") from None


def analyze_on_cluster(
    paths: Sequence[str],
    client: Any,
    *,
    on_workers: bool = False,
    rules_file: str | os.PathLike[str] | None = None,
    tz: tzinfo | None = None,
    generated_at: str | None = None,
    stage: StageFn | None = None,
    starts_per_day: float | None = None,
) -> Report:
    """The report of ``paths`` with every group read by a task of ``client``'s cluster."""

    def tell(name: str, done: int = 0, total: int = 0) -> None:
        if stage is not None:
            stage(name, done, total)

    jobs: list[_Job] = []
    problems: list[Problem] = []
    try:
        if on_workers:
            tell("listing files on the workers")
            for name, addr, plan in _worker_plans(client, list(paths)):
                if isinstance(plan, str):
                    problems.append(Problem(f"{name}:{' '.join(paths)}", plan))
                    continue
                problems.extend(plan.problems)
                jobs += [_Job(g, addr) for g in plan.groups]
        else:
            # an artifact at the fleet's root read apart, joined here once all are read
            # (diag.facts.deferred): as in one pass, without one task holding the fleet
            plan = plan_groups(paths, defer=True)
            problems.extend(plan.problems)
            jobs = [_Job(g, None) for g in plan.groups]
        keyed = any(j.group.deferred for j in jobs)
        for job in jobs:
            pin = (
                {}
                if job.worker is None
                else {"workers": [job.worker], "allow_other_workers": False}
            )
            job.future = client.submit(
                read_group, job.group, tz, keep_tables=False, keyed=keyed, pure=False, **pin
            )
        parts = _collect(client, jobs, tell)
        if keyed:
            from diag.facts.deferred import join_deferred

            join_deferred(parts, [j.group.deferred for j in jobs], tz)
    except KeyboardInterrupt:
        client.cancel([j.future for j in jobs if j.future is not None], force=True)
        raise
    return judge_groups(
        problems,
        parts,
        rules_file,
        generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        tell,
        starts_per_day,
        lambda wanted: _read_lines(client, wanted, {j.prefix: j.worker for j in jobs}),
    )


@dataclass
class _Job:
    group: InputGroup
    worker: str | None  # the address a task is pinned to (--on-workers)
    future: Any = None

    @property
    def prefix(self) -> str:
        """``<worker name>:`` of the paths a pinned job shows ('' unpinned)."""
        if self.worker is None or not self.group.files:
            return ""
        return self.group.files[0].path.partition(":")[0] + ":"


def _collect(client: Any, jobs: list[_Job], tell: Any) -> list[GroupFacts]:
    """Every job's result in order; a failed task or lost worker gives its inputs skipped."""
    total = sum(len(j.group.files) for j in jobs)
    out: dict[int, GroupFacts] = {}
    done = 0
    tell("reading files on the cluster", 0, total)
    while len(out) < len(jobs):
        alive = None
        for k, job in enumerate(jobs):
            if k in out:
                continue
            fut = job.future
            if fut.status == "finished":
                out[k] = fut.result()
            elif fut.status in ("error", "cancelled", "lost"):
                out[k] = _skipped(job.group, _why(fut))
            else:
                if job.worker is None:
                    continue
                if alive is None:
                    alive = set(client.scheduler_info()["workers"])
                if job.worker in alive:
                    continue
                client.cancel([fut], force=True)
                out[k] = _skipped(job.group, f"its worker {job.worker} was lost before reading it")
            done += len(job.group.files)
            tell("reading files on the cluster", done, total)
        if len(out) < len(jobs):
            time.sleep(POLL_S)
    return [out[k] for k in range(len(jobs))]


def _why(fut: Any) -> str:
    if fut.status != "error":
        return f"its task was {fut.status} on the cluster"
    exc = fut.exception()
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"its task failed on the cluster ({type(exc).__name__}{': ' + text if text else ''})"


def _skipped(group: InputGroup, reason: str) -> GroupFacts:
    statuses = [
        InputStatus(f.path, status="skipped", reason=f"not analysed: {reason}") for f in group.files
    ]
    return GroupFacts(statuses, [], [], [], [], [], keys=[])  # (no run to join to)


# ------------------------------------------------------------------ --on-workers
def _worker_plans(client: Any, patterns: list[str]) -> list[tuple[str, str, GroupPlan | str]]:
    """(worker name, address, its plan or why it has none) for every worker, by name."""
    workers = client.scheduler_info()["workers"]
    named = sorted(((str(w.get("name", a)), a) for a, w in workers.items()), key=lambda t: t[0])
    futures = [
        client.submit(plan_here, patterns, name, workers=[a], allow_other_workers=False, pure=False)
        for name, a in named
    ]
    out: list[tuple[str, str, GroupPlan | str]] = []
    for (name, addr), fut in zip(named, futures, strict=True):
        try:
            out.append((name, addr, fut.result()))
        except Exception as exc:  # noqa: BLE001 - the worker's inputs are listed as lost
            out.append((name, addr, f"worker lost before listing its files ({type(exc).__name__})"))
    return out


def plan_here(patterns: list[str], name: str) -> GroupPlan:
    """Worker: its own files of ``patterns``, shown as ``<name>:<path>``."""
    paths: list[str] = []
    missing: list[Problem] = []
    for pattern in patterns:
        local = os.path.expandvars(os.path.expanduser(pattern))
        found = sorted(glob.glob(local, recursive=True)) if glob.has_magic(local) else [local]
        if not found:
            missing.append(Problem(local, "no such file or folder (glob matched nothing)"))
        paths += found
    plan = plan_groups(paths)
    groups = tuple(InputGroup(tuple(_shown(f, name) for f in g.files)) for g in plan.groups)
    problems = tuple(replace(p, path=f"{name}:{p.path}") for p in (*missing, *plan.problems))
    return GroupPlan(problems, groups)


def _shown(f: InputFile, name: str) -> InputFile:
    return replace(f, path=f"{name}:{f.path}", group=f"{name}:{f.group}")


def _read_lines(
    client: Any, wanted: Mapping[str, set[int]], workers: Mapping[str, str | None]
) -> dict[str, dict[int, str]]:
    """Evidence lines read by tasks where the files are (a lost worker's stay unread)."""
    by_worker: dict[str | None, dict[str, set[int]]] = {}
    for path, lines in wanted.items():
        prefix = path.partition(":")[0] + ":" if ":" in path else ""
        worker = workers.get(prefix)
        by_worker.setdefault(worker, {})[path] = lines
    out: dict[str, dict[int, str]] = {}
    for worker, part in by_worker.items():
        pin = {} if worker is None else {"workers": [worker], "allow_other_workers": False}
        try:
            fut = client.submit(read_here, part, pure=False, **pin)
            out.update(fut.result(timeout=120))
        except Exception:  # noqa: BLE001,S110 - evidence keeps the text its rule wrote
            continue
    return out


def read_here(wanted: Mapping[str, set[int]]) -> dict[str, dict[int, str]]:
    """Worker: the wanted lines of its files (shown paths carry ``<name>:``)."""
    local = {_local_path(p): (p, lines) for p, lines in wanted.items()}
    texts = read_all({k: v[1] for k, v in local.items()})
    return {local[k][0]: v for k, v in texts.items()}


def _local_path(shown: str) -> str:
    head, sep, rest = shown.partition(":")
    return rest if sep and not Path(shown).exists() and head and "/" not in head else shown


__all__ = ["INSTALL_HINT", "ClusterUnavailable", "Connection", "analyze_on_cluster", "connect"]
