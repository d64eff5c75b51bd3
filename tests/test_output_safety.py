"""Output safety: reports appear whole or not at all, inputs are never written to, and the
JSON report is the same bytes for the same inputs (bar ``generated_at``).

Reports go to a temporary file beside the target and are renamed into place
(``diag.output.write_atomic``); SIGTERM is turned into KeyboardInterrupt so that the
temporary file is removed on the way out. These tests interrupt runs in every way we can
(an exception half-way through a write, before the rename, real SIGINT/SIGTERM to a
running ``python -m diag``) and look for leftovers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import diag.output
from diag.cli import main
from diag.output import write_atomic
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def listing(folder: Path) -> dict[str, tuple[int, str]]:
    """Every entry under ``folder`` (hidden ones too) with its mode and content hash."""
    out: dict[str, tuple[int, str]] = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
        out[str(path.relative_to(folder))] = (st.st_mode, digest)
    return out


def leftovers(folder: Path) -> list[str]:
    """Temporary files write_atomic would have left behind."""
    return sorted(p.name for p in folder.glob(".*.tmp")) if folder.exists() else []


# --------------------------------------------------------------------------- interrupted writes
class _HalfWriter:
    """A file object that writes half of what it is given, then is interrupted."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def __enter__(self) -> _HalfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()

    def fileno(self) -> int:
        return int(self.fh.fileno())

    def write(self, data: bytes) -> int:
        self.fh.write(data[: len(data) // 2])
        self.fh.flush()
        raise KeyboardInterrupt("interrupted half-way through the write")


def _old_report(out: Path) -> Path:
    """A report from an earlier run that an interrupted run must leave intact."""
    out.mkdir(parents=True, exist_ok=True)
    old = out / "sglang-healthy.graphdiag.json"
    old.write_text('{"schema": "graphdiag.report/1", "old": true}\n')
    return old


def _analyze(out: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        main, ["analyze", str(INCIDENTS / "sglang-healthy"), "-o", str(out), "-q", *extra]
    )


def test_interrupted_half_way_through_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "reports"
    old = _old_report(out)
    before = old.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        diag.output.os, "fdopen", lambda fd, mode: _HalfWriter(real_fdopen(fd, mode))
    )
    res = _analyze(out, "--no-html")
    assert res.exit_code != 0 and res.stdout == ""
    assert old.read_bytes() == before  # the previous report is not half-overwritten
    assert sorted(p.name for p in out.iterdir()) == [old.name]
    assert leftovers(out) == []


def test_interrupted_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "reports"

    def no_rename(*_: Any) -> None:
        raise KeyboardInterrupt("interrupted between write and rename")

    monkeypatch.setattr(diag.output.os, "replace", no_rename)
    res = _analyze(out)
    assert res.exit_code != 0
    assert list(out.iterdir()) == []


def test_interrupted_in_the_html_renderer_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reports are written piece by piece into temporaries renamed once both are whole: an
    interrupt halfway through the HTML (pieces of it already on disk) leaves no report at
    all, never a half one."""
    import diag.render.html

    real = diag.render.html.html_chunks

    def interrupted(*a: Any, **k: Any) -> Iterator[str]:
        pieces = real(*a, **k)
        yield next(pieces)
        yield next(pieces)
        raise KeyboardInterrupt("interrupted while rendering HTML")

    monkeypatch.setattr(diag.render.html, "html_chunks", interrupted)
    out = tmp_path / "reports"
    res = _analyze(out)
    assert res.exit_code == 130
    assert not out.exists() or not any(out.iterdir())


def test_write_atomic_failure_leaves_target_and_folder_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(diag.output.os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_atomic(target, "new" * 1000)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_reports_get_the_permissions_of_a_new_file(tmp_path: Path) -> None:
    """Not mkstemp's 0600: a report on a shared box must stay readable by the team."""
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.json", "{}")
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644
        (tmp_path / "kept.json").write_text("old")
        (tmp_path / "kept.json").chmod(0o640)
        write_atomic(tmp_path / "kept.json", "{}")
        assert stat.S_IMODE((tmp_path / "kept.json").stat().st_mode) == 0o640
    finally:
        os.umask(umask)


# --------------------------------------------------------------------------- real signals
def _big_log(path: Path, mib: int) -> Path:
    """A long SGLang serving log: the healthy incident's start-up, then decode traffic."""
    lines = (INCIDENTS / "sglang-healthy" / "server.log").read_bytes().split(b"\n")
    head = b"\n".join(lines) if lines[-1] else b"\n".join(lines[:-1]) + b"\n"
    decode = b"".join(ln + b"\n" for ln in lines if b"Decode batch" in ln)
    with open(path, "wb") as fh:
        fh.write(head)
        for _ in range(mib * 2**20 // len(decode) + 1):
            fh.write(decode)
    return path


def _wait_until_reading(proc: subprocess.Popen[bytes], path: Path, timeout: float = 30.0) -> None:
    """Until the process has the input open (so it is past start-up, analysing)."""
    fd_dir = Path(f"/proc/{proc.pid}/fd")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        if not fd_dir.is_dir():  # no /proc: give start-up a moment instead
            time.sleep(2.0)
            return
        try:
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                return
        except OSError:
            pass
        time.sleep(0.01)
    pytest.fail("the run never opened its input")


@pytest.fixture(scope="module")
def big_incident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("big") / "incident"
    folder.mkdir()
    _big_log(folder / "server.log", 40)  # below the parallel threshold: one process to signal
    yield folder
    (folder / "server.log").unlink()


def _default_sigint() -> None:
    """A shell without job control starts background jobs with SIGINT ignored, and Python
    keeps it ignored; the child must get SIGINT the way a terminal user's run does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=cwd,
        preexec_fn=_default_sigint,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_analysing_leaves_no_report(
    tmp_path: Path, big_incident: Path, sig: int
) -> None:
    out = tmp_path / "reports"
    proc = _popen(
        [sys.executable, "-m", "diag", "analyze", str(big_incident), "-o", str(out), "-q"], tmp_path
    )
    _wait_until_reading(proc, big_incident / "server.log")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode not in (0, 2), err.decode()
    assert b"Traceback" not in err
    assert not out.exists() or list(out.iterdir()) == []


def _processes_with(marker: str) -> list[int]:
    """Pids whose command line mentions ``marker`` (forked workers share the parent's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="needs /proc to find worker processes"
)
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_interrupt_while_worker_processes_scan(tmp_path: Path, how: str) -> None:
    """Above the parallel threshold the scan runs in worker processes. SIGTERM to graphdiag,
    or Ctrl-C (SIGINT to the whole process group, workers included), still ends the run
    promptly, with no report and no orphaned worker."""
    from diag.ingest import PARALLEL_MIN_BYTES, resolve_jobs

    folder = tmp_path / "incident"
    folder.mkdir()
    _big_log(folder / "server.log", PARALLEL_MIN_BYTES // 2**20 + 16)
    out = tmp_path / f"reports-{how}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag", "analyze", str(folder), "-o", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=tmp_path,
        preexec_fn=_default_sigint,
        start_new_session=True,
    )
    # SIGTERM once every worker is busy (a signal landing inside fork() is lost: see the
    # report); Ctrl-C as soon as the first worker exists, when workers wait for tasks
    want = 1 + (resolve_jobs(None, PARALLEL_MIN_BYTES + 1) if how == "SIGTERM" else 1)
    deadline = time.monotonic() + 60
    while len(_processes_with(str(out))) < want:
        assert proc.poll() is None and time.monotonic() < deadline, (
            "the worker processes did not start"
        )
        time.sleep(0.02)
    if how == "SIGTERM":
        time.sleep(0.3)
    try:
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:  # whatever happened, leave no process of ours behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode not in (0, 2), err.decode()
    assert b"Traceback" not in err, err.decode()
    deadline = time.monotonic() + 10
    while _processes_with(str(out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(str(out)) == [], "worker processes outlived graphdiag"
    assert not out.exists() or list(out.iterdir()) == []
    (folder / "server.log").unlink()  # pytest keeps recent tmp folders: do not leave 80 MB behind


SLOW_WRITER = """
import os, sys, time
real_fdopen = os.fdopen

class Slow:
    def __init__(self, fh):
        self.fh = fh
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.fh.close()
    def write(self, data):
        sys.stderr.write("WRITING\\n")
        sys.stderr.flush()
        for i in range(0, len(data), 64):
            self.fh.write(data[i:i + 64])
            self.fh.flush()
            time.sleep(0.01)
    def flush(self):
        self.fh.flush()
    def fileno(self):
        return self.fh.fileno()

os.fdopen = lambda fd, mode="r", *a, **k: Slow(real_fdopen(fd, mode, *a, **k))
from diag.cli import main
sys.argv[0] = "graphdiag"
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_during_the_write_leaves_no_partial_report(tmp_path: Path, sig: int) -> None:
    """A real signal while the report is being written (the writer is slowed down so the
    signal lands mid-write): the temporary file goes, the earlier report stays whole."""
    out = tmp_path / "reports"
    old = _old_report(out)
    before = old.read_bytes()
    proc = _popen(
        [
            sys.executable,
            "-c",
            SLOW_WRITER,
            "analyze",
            str(INCIDENTS / "sglang-healthy"),
            "-o",
            str(out),
            "-q",
        ],
        tmp_path,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line == b"WRITING\n", line + proc.stderr.read()
    time.sleep(0.1)  # some bytes are in the temporary file now
    assert leftovers(out), "no temporary file while writing"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode not in (0, 2), err.decode()
    assert b"Traceback" not in err
    assert leftovers(out) == []
    assert sorted(p.name for p in out.iterdir()) == [old.name]
    assert old.read_bytes() == before


# --------------------------------------------------------------------------- inputs untouched
def _mixed_inputs(folder: Path) -> Path:
    """An incident folder with every kind of input: rotated set with .gz, another engine,
    a snapshot, an operator table, and bad inputs."""
    from gen.profiler_tables import format_table
    from gen.snapshots import write_snapshot

    shutil.copytree(INCIDENTS / "sglang-rotated-docker", folder / "sglang")
    shutil.copytree(INCIDENTS / "vllm-out-of-window-metrics", folder / "vllm")
    write_snapshot(
        folder / "sglang" / "cuda_graph_runner_memory_usage.pickle",
        default_pool_bytes=8 << 20,
        graph_pools=[2 << 20],
        torch_format="2.5",
    )
    rows = [
        {
            "name": "aten::mm",
            "self_cpu_us": 250.0,
            "cpu_total_us": 300.0,
            "self_cuda_us": 10.0,
            "cuda_total_us": 12.5,
            "calls": 3,
        }
    ]
    (folder / "sglang" / "profile.txt").write_text(
        format_table(rows, layout="cuda", sort_by="cuda_time_total")
    )
    (folder / "empty.log").write_bytes(b"")
    (folder / "old.log.gz").write_bytes(gzip.compress(b"x" * 10000)[:40])
    (folder / "gone.log").symlink_to(folder / "nowhere")
    return folder


@pytest.mark.slow
def test_nothing_is_written_into_input_folders(tmp_path: Path) -> None:
    inputs = _mixed_inputs(tmp_path / "incident")
    work = tmp_path / "cwd"
    work.mkdir()
    for path in [inputs, *inputs.rglob("*")]:  # read-only, as an attached ticket folder would be
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        before = listing(inputs)
        for args in (
            ["-o", str(tmp_path / "out")],
            [],
        ):  # explicit -o, and the default reports/ in cwd
            proc = subprocess.run(
                [sys.executable, "-m", "diag", "analyze", str(inputs), "-q", *args],
                capture_output=True,
                env=ENV,
                cwd=work,
                timeout=300,
            )
            assert proc.returncode in (0, 1), proc.stderr.decode()
            assert listing(inputs) == before
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
            "incident.graphdiag.html",
            "incident.graphdiag.json",
        ]
        assert sorted(p.name for p in (work / "reports").iterdir()) == [
            "incident.graphdiag.html",
            "incident.graphdiag.json",
        ]
    finally:
        for path in [inputs, *inputs.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)


# --------------------------------------------------------------------------- determinism
@pytest.mark.slow
def test_json_report_is_deterministic(tmp_path: Path) -> None:
    """Two runs in separate processes (different hash seeds): same bytes but ``generated_at``."""
    inputs = _mixed_inputs(tmp_path / "incident")
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"out{seed}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "diag",
                "analyze",
                str(inputs),
                str(INCIDENTS / "sglang-capture-oom"),
                "-o",
                str(out),
                "--no-html",
                "-q",
                "--format",
                "json",
            ],
            capture_output=True,
            env={**ENV, "PYTHONHASHSEED": seed},
            timeout=300,
        )
        assert proc.returncode in (0, 1), proc.stderr.decode()
        written = (out / "incident.graphdiag.json").read_bytes()
        assert written == proc.stdout
        outputs.append(written)
    a, b = (o.decode().splitlines() for o in outputs)
    assert len(a) == len(b)
    differing = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert all('"generated_at"' in x and '"generated_at"' in y for x, y in differing), differing[:5]
    assert len(differing) <= 1
    doc = json.loads(outputs[0])
    assert {"ok", "skipped"} <= {i["status"] for i in doc["inputs"]}
    assert doc["runs"] and doc["snapshots"] and doc["profiles"]


@pytest.mark.parametrize("command", ["parse", "recommend"])
def test_every_command_exits_as_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Ctrl-C in any command (not only analyze) ends with 130 and one line, not click's
    "Aborted!" and exit 1."""
    import diag.ingest
    from diag.cli import main

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt("Ctrl-C while reading")

    import diag.pipeline

    monkeypatch.setattr(diag.ingest, "ingest", interrupted)  # parse reads it from here
    # recommend, through analyze (which reads group by group, diag.fleet)
    monkeypatch.setattr(diag.pipeline, "ingest_files", interrupted)
    log = tmp_path / "server.log"
    log.write_bytes((INCIDENTS / "sglang-healthy" / "server.log").read_bytes())
    result = CliRunner().invoke(main, [command, str(log)])
    assert result.exit_code == 130, result.output
    assert "graphdiag: interrupted; no report written" in result.output
    assert "Aborted" not in result.output


def test_the_program_runs_openblas_single_threaded_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The entry point sets OPENBLAS_NUM_THREADS=1 before numpy can load (its spinning
    threads take CPU from the scan workers), and keeps a value the user set."""
    import diag.cli
    from diag.entry import run

    seen: list[str | None] = []

    def fake_cli_run() -> None:
        seen.append(os.environ.get("OPENBLAS_NUM_THREADS"))
        raise SystemExit(0)

    monkeypatch.setattr(diag.cli, "run", fake_cli_run)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with pytest.raises(SystemExit):
        run()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    with pytest.raises(SystemExit):
        run()
    assert seen == ["1", "4"]
    src = (ROOT / "diag" / "entry.py").read_text()
    assert "import numpy" not in src and "from diag" not in src.split("def run")[0]
