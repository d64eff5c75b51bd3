"""``analyze --cluster`` on a real Dask cluster of this machine (every address on the
loopback): the same report as a local run, --on-workers reading each worker's own folder,
a worker killed mid-run. One cluster for the module; skipped without ``graphdiag[cluster]``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diag.api import analyze
from diag.fleet.cluster import INSTALL_HINT, analyze_on_cluster
from diag.render.serialize import to_json
from tests.conftest import CORPUS, ROOT

distributed = pytest.importorskip("distributed")

INCIDENTS = ROOT / "fixtures" / "incidents"
LOGS_VAR = "GRAPHDIAG_TEST_LOGS"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _same(a: str, b: str) -> None:
    assert json.loads(a) == json.loads(b)
    assert a == b


@pytest.mark.parametrize("name", sorted(p.name for p in INCIDENTS.iterdir()))
def test_cluster_report_is_the_local_report(client: Any, name: str) -> None:
    paths = [str(INCIDENTS / name)]
    local = to_json(analyze(paths, generated_at="fixed"))
    _same(to_json(analyze_on_cluster(paths, client, generated_at="fixed")), local)


@pytest.mark.corpus
@pytest.mark.parametrize(
    "sub", ["real", "real-2", "real-3", "snapshots", "profiler-tables", "traces"]
)
def test_cluster_report_of_a_shared_corpus_is_the_local_report(client: Any, sub: str) -> None:
    folder = CORPUS / sub
    if not folder.is_dir():
        pytest.skip("shared corpus not present")
    paths = [str(folder)]
    local = to_json(analyze(paths, generated_at="fixed"))
    _same(to_json(analyze_on_cluster(paths, client, generated_at="fixed")), local)


def _worker_folders(client: Any, tmp_path: Path, counts: dict[int, int]) -> dict[str, Path]:
    """Give each worker (by name) a folder of its own and point its LOGS_VAR at it: the same
    glob then names different files on each worker, as on separate machines."""
    names = {a: str(w["name"]) for a, w in client.scheduler_info()["workers"].items()}
    out = {}
    for i, (addr, name) in enumerate(sorted(names.items(), key=lambda kv: kv[1])):
        folder = tmp_path / f"worker-{name}"
        for k in range(counts.get(i, 1)):
            src = INCIDENTS / ("sglang-kv-squeeze" if i == 0 else "vllm-healthy") / "server.log"
            pod = folder / f"pod-{k:03d}"
            pod.mkdir(parents=True)
            shutil.copy(src, pod / "server.log")
        # (exec: a builtin travels by name; os.environ's bound method would set a copy)
        client.run(exec, f"import os; os.environ[{LOGS_VAR!r}] = {str(folder)!r}", workers=[addr])
        out[name] = folder
    return out


def test_on_workers_reads_each_workers_own_folder(client: Any, tmp_path: Path) -> None:
    folders = _worker_folders(client, tmp_path, {0: 2, 1: 3})
    report = analyze_on_cluster(
        [f"${LOGS_VAR}/**/*.log"], client, on_workers=True, generated_at="fixed"
    )
    by_worker: dict[str, list[str]] = {}
    for run in report.runs:
        name, _, path = run.sources[0].partition(":")
        by_worker.setdefault(name, []).append(path)
        assert Path(path).is_relative_to(folders[name])
    assert {k: len(v) for k, v in by_worker.items()} == {
        n: c for n, c in zip(sorted(folders), (2, 3), strict=True)
    }
    # each run as a local analysis of its own file judges it (paths shown with the worker)
    for run in report.runs:
        local = analyze([run.sources[0].partition(":")[2]], generated_at="fixed").runs[0]
        assert (run.verdict, [f.code for f in run.findings]) == (
            local.verdict,
            [f.code for f in local.findings],
        )
        assert all(ev.text for f in run.findings for ev in f.evidence)  # read on the worker


def test_a_worker_killed_mid_run_leaves_the_rest_whole(client: Any, tmp_path: Path) -> None:
    """The second worker is killed once the reading tasks are out: the first worker's runs
    are all in the report, the lost worker's inputs are skipped with the reason."""
    folders = _worker_folders(client, tmp_path, {0: 3, 1: 600})
    pids = client.run(os.getpid)
    names = {a: str(w["name"]) for a, w in client.scheduler_info()["workers"].items()}
    victim = max(names, key=names.__getitem__)
    killed = []

    def stage(name: str, done: int, total: int) -> None:
        if name == "reading files on the cluster" and not killed:
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    report = analyze_on_cluster(
        [f"${LOGS_VAR}/**/*.log"], client, on_workers=True, generated_at="fixed", stage=stage
    )
    assert killed
    first, lost = sorted(folders)
    kept = [r for r in report.runs if r.sources[0].startswith(first + ":")]
    assert len(kept) == 3
    theirs = [i for i in report.inputs if i.path.startswith(lost + ":")]
    assert len(theirs) == 600
    skipped = [i for i in theirs if i.status == "skipped"]
    assert skipped, "the killed worker's reads all finished before it was killed"
    assert all(i.reason and i.reason.startswith("not analysed:") for i in skipped)
    assert all("lost" in (i.reason or "") or "failed" in (i.reason or "") for i in skipped)
    json.loads(to_json(report))  # the report is whole and serialises


def test_without_dask_cluster_says_how_to_install(tmp_path: Path) -> None:
    """Dask hidden from the import system: one stderr line, exit 2 (a usage error)."""
    code = (
        "import sys; sys.modules['distributed'] = None; "
        "from diag.entry import run; sys.argv = ['graphdiag', 'analyze', '--cluster', 'local', "
        f"{str(INCIDENTS / 'vllm-healthy')!r}, '-o', {str(tmp_path)!r}]; run()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"graphdiag: {INSTALL_HINT}"]
    assert done.stdout == ""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diag", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_cluster_local_writes_the_local_report(tmp_path: Path) -> None:
    target = str(INCIDENTS / "sglang-rotated-docker")
    there = _cli(
        "analyze", "--cluster", "local:2", target, "-o", str(tmp_path / "c"), "--format", "json"
    )
    here = _cli("analyze", target, "-o", str(tmp_path / "l"), "--format", "json")
    assert there.returncode == here.returncode
    a, b = json.loads(there.stdout), json.loads(here.stdout)
    a.pop("generated_at"), b.pop("generated_at")
    assert a == b and a["runs"]


def test_cli_on_workers_needs_a_cluster(tmp_path: Path) -> None:
    done = _cli("analyze", "--on-workers", str(INCIDENTS / "vllm-healthy"), "-o", str(tmp_path))
    assert done.returncode == 2 and "--on-workers" in done.stderr


def test_a_root_artifact_on_the_cluster_is_joined_as_in_one_pass(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot, table and trace at a fleet's root are read by tasks of their own and
    joined once every task is back (no task reads the whole fleet): the one-pass report."""
    import diag.sources.groups as groups
    from diag.ingest import ingest
    from tests.test_deferred_joins import _fleet, _root_all

    root = _fleet(tmp_path)
    _root_all(root)
    paths = [str(root)]
    want = to_json(analyze(paths, ingested=ingest(paths), generated_at="fixed"))
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    plans: list[groups.GroupPlan] = []

    def plan(*a: Any, **k: Any) -> groups.GroupPlan:
        plans.append(groups.plan_groups(*a, **k))
        return plans[-1]

    import diag.fleet.cluster as cluster

    monkeypatch.setattr(cluster, "plan_groups", plan)
    _same(to_json(analyze_on_cluster(paths, client, generated_at="fixed")), want)
    # read as many tasks, the root's artifacts apart (not one task holding the fleet)
    (read,) = plans
    assert sum(g.deferred for g in read.groups) == 3 and len(read.groups) > 6
