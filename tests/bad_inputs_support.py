"""The bad inputs of ``tests/test_bad_inputs.py`` and the harness that runs the CLI on them.

Each ``make_*`` writes one row's bad input (``docs/bad-inputs.md``) into a folder and returns
its path; :func:`cli`, :func:`with_good` and :func:`alone` run ``graphdiag analyze`` and read
the outcome back; the ``assert_*`` helpers check the contract every row shares.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from diag.cli import main
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
GOOD = INCIDENTS / "sglang-healthy" / "server.log"
TRUTH = yaml.safe_load((INCIDENTS / "sglang-healthy" / "truth.yaml").read_text())["record"]
GOOD_BATCHES = (TRUTH["batches"]["graph"], TRUTH["batches"]["eager"])

Make = Callable[[Path], Path]  # writes the bad input into a folder, returns its path


# --------------------------------------------------------------------------- harness
@dataclass
class Outcome:
    code: int
    doc: dict[str, Any] | None
    stderr: str

    def entry(self, path: Path) -> dict[str, Any]:
        assert self.doc is not None
        found = [i for i in self.doc["inputs"] if i["path"] == str(path)]
        assert len(found) == 1, (
            f"{path} listed {len(found)} times in inputs[]: {self.doc['inputs']}"
        )
        return found[0]

    def runs_from(self, path: Path) -> list[dict[str, Any]]:
        assert self.doc is not None
        return [r for r in self.doc["runs"] if str(path) in r["sources"]]

    def stderr_lines(self, path: Path) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if str(path) in ln]


def cli(*paths: Path, out: Path) -> Outcome:
    """``graphdiag analyze`` in this process; an uncaught exception fails the test."""
    res = CliRunner().invoke(
        main,
        ["analyze", *map(str, paths), "-o", str(out), "--no-html", "--format", "json", "-q"],
        catch_exceptions=False,
    )
    doc = json.loads(res.stdout) if res.exit_code != 2 else None
    return Outcome(res.exit_code, doc, res.stderr)


def with_good(tmp_path: Path, make: Make) -> tuple[Outcome, Path, Path]:
    """Analyse a folder holding the bad input and the good log; returns (outcome, bad, folder)."""
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(GOOD, folder / "server.log")
    bad = make(folder)
    return cli(folder, out=tmp_path / "reports"), bad, folder


def alone(tmp_path: Path, make: Make) -> tuple[Outcome, Path]:
    folder = tmp_path / "alone"
    folder.mkdir()
    bad = make(folder)
    return cli(folder, out=tmp_path / "reports-alone"), bad


def assert_good_log_analysed(outcome: Outcome, folder: Path) -> None:
    runs = outcome.runs_from(folder / "server.log")
    assert len(runs) == 1
    batches = runs[0]["record"]["batches"]
    assert (batches["graph"], batches["eager"]) == GOOD_BATCHES
    assert runs[0]["sources"] == [str(folder / "server.log")]
    assert outcome.entry(folder / "server.log")["status"] == "ok"


def assert_row(
    outcome: Outcome, bad: Path, folder: Path, status: str, reason: str | None
) -> dict[str, Any]:
    """The contract every row shares; returns the bad input's ``inputs[]`` entry."""
    assert outcome.code in (0, 1), outcome.stderr
    entry = outcome.entry(bad)
    assert entry["status"] == status, entry
    if reason is None:
        assert entry["reason"] is None
        assert outcome.stderr_lines(bad) == []
    else:
        assert reason in (entry["reason"] or ""), entry
        lines = outcome.stderr_lines(bad)
        assert len(lines) == 1 and reason in lines[0] and status in lines[0], outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert_good_log_analysed(outcome, folder)
    return entry


def good_lines() -> list[bytes]:
    """The good log's physical lines (split on newlines only: tqdm redraws keep their ``\\r``)."""
    return [ln + b"\n" for ln in GOOD.read_bytes().rstrip(b"\n").split(b"\n")]


def own_batches(outcome: Outcome, path: Path) -> tuple[int, int]:
    runs = outcome.runs_from(path)
    return (
        sum(r["record"]["batches"]["graph"] for r in runs),
        sum(r["record"]["batches"]["eager"] for r in runs),
    )


# --------------------------------------------------------------------------- the bad inputs, by row
def make_empty(folder: Path) -> Path:
    path = folder / "empty.log"
    path.write_bytes(b"")
    return path


def make_binary(folder: Path) -> Path:
    """A tensor dump: packed little integers, mostly NUL bytes, like any core/.npy/.so file."""
    path = folder / "engine_core.dump"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + struct.pack("<40000i", *range(40000)))
    return path


def _big_log() -> bytes:
    """An SGLang log well past the 256 KiB sniffing head once decompressed."""
    lines = good_lines()
    decode = [ln for ln in lines if b"Decode batch" in ln]
    return b"".join(lines) + b"".join(decode) * 60


def make_truncated_gz(folder: Path) -> Path:
    path = folder / "previous-server.log.gz"
    data = gzip.compress(_big_log(), mtime=0)
    path.write_bytes(data[: len(data) * 6 // 10])
    return path


def make_gzip_of_garbage(folder: Path) -> Path:
    path = folder / "server-old.log.gz"
    path.write_bytes(b"\x1f\x8b" + bytes((i * 37 + 11) % 256 for i in range(4096)))
    return path


def make_invalid_utf8(folder: Path) -> Path:
    path = folder / "latin1.log"
    path.write_bytes(
        b"".join(
            ln.replace(b"Qwen", b"Qw\xe9n")
            .replace(b"#token", b"\xff\xfe#token")
            .replace(b"Capture", b"\xc3(Capture")
            for ln in good_lines()
        )
    )
    return path


#: the command with its peak resident memory on stderr (``PEAK_KIB n``) from the kernel's
#: high-water mark of this program's own memory (``VmHWM``: reset by exec, unlike
#: ``ru_maxrss``, which keeps the forking test process's size)
HWM_WRAPPER = (
    "import atexit, sys\n"
    "def _peak():\n"
    "    for ln in open('/proc/self/status'):\n"
    "        if ln.startswith('VmHWM:'):\n"
    "            sys.stderr.write('PEAK_KIB %s\\n' % ln.split()[1])\n"
    "atexit.register(_peak)\n"
    "from diag.cli import main\n"
    "sys.argv[0] = 'graphdiag'\n"
    "main()\n"
)


def peak_mib(stderr: str) -> float:
    return int(stderr.split("PEAK_KIB ")[1].split()[0]) / 1024


RSS_WRAPPER = (
    "import atexit, resource, sys\n"
    "atexit.register(lambda: sys.stderr.write("
    "'MAXRSS_KIB %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
    "from diag.cli import main\n"
    "sys.argv[0] = 'graphdiag'\n"
    "main()\n"
)


def make_crlf(folder: Path) -> Path:
    path = folder / "windows.log"
    path.write_bytes(b"".join(ln.replace(b"\n", b"\r\n") for ln in good_lines()))
    return path


def make_nul_bytes(folder: Path) -> Path:
    """NUL bytes inside lines, as a crashed or racing writer leaves them."""
    path = folder / "nul.log"
    path.write_bytes(
        b"".join(
            ln[:1] + b"\x00" + ln[1:-1] + b"\x00\n" if i % 3 == 0 else ln
            for i, ln in enumerate(good_lines())
        )
    )
    return path


def make_unreadable(folder: Path) -> Path:
    path = folder / "root-only.log"
    shutil.copy(GOOD, path)
    path.chmod(0)
    return path


def deny_access(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Root reads mode-000 files, so when we run as root deny access the way the kernel would."""
    if os.geteuid() != 0:
        return
    real = os.access

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if Path(path).name == name:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def make_fifo(folder: Path) -> Path:
    path = folder / "live.log"
    os.mkfifo(path)
    return path


def make_broken_symlink(folder: Path) -> Path:
    path = folder / "current.log"
    path.symlink_to(folder / "server.log.20250101-gone")
    return path


def make_symlink_loop(folder: Path) -> Path:
    a, b = folder / "a.log", folder / "b.log"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def many_small_files(folder: Path, count: int) -> list[Path]:
    """Per-worker logs as a ray/k8s log folder holds them: a few lines, no server output."""
    paths = []
    for i in range(count):
        path = folder / f"worker-{i:05d}.out"
        path.write_text(f"worker {i} started on node-{i % 7}\nheartbeat ok\n")
        paths.append(path)
    return paths


OOM_LOG = INCIDENTS / "sglang-capture-oom" / "server.log"


def cut_oom_log(folder: Path, before: bytes, keep: int = 0) -> Path:
    """The capture-OOM incident cut at the first line containing ``before`` (plus ``keep`` bytes of it)."""
    data = OOM_LOG.read_bytes()
    at = data.index(before)
    path = folder / "crashed-during-capture.log"
    path.write_bytes(data[: at + keep])
    return path


def make_newest_first(folder: Path) -> Path:
    path = folder / "newest-first.log"
    path.write_bytes(b"".join(reversed(good_lines())))
    return path


OTHER = INCIDENTS / "sglang-out-of-window"
OTHER_TRUTH = yaml.safe_load((OTHER / "truth.yaml").read_text())["record"]


def interleave(prefix_a: bytes = b"", prefix_b: bytes = b"") -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        a = good_lines()
        b = [ln + b"\n" for ln in (OTHER / "server.log").read_bytes().rstrip(b"\n").split(b"\n")]
        out = []
        for i in range(max(len(a), len(b))):
            out += [prefix_a + a[i]] if i < len(a) else []
            out += [prefix_b + b[i]] if i < len(b) else []
        path = folder / "two-servers.log"
        path.write_bytes(b"".join(out))
        return path

    return make


def make_not_a_snapshot(folder: Path) -> Path:
    path = folder / "cuda_graph_runner_memory_usage.pickle"
    path.write_bytes(pickle.dumps({"step": 3, "loss": [1.5, 1.2]}, protocol=4))
    return path


def make_oversized_pickle(folder: Path) -> Path:
    """A valid pickle header, then a sparse hole up to 600 MiB (no disk space used)."""
    path = folder / "cuda_graph_runner_memory_usage.pickle"
    with open(path, "wb") as fh:
        fh.write(pickle.dumps({"segments": [], "device_traces": []}, protocol=4))
        fh.truncate(600 * 2**20)
    return path


def make_cut_table(folder: Path) -> Path:
    from gen.profiler_tables import format_table

    rows = [
        {
            "name": f"aten::op{i}",
            "self_cpu_us": 100.0 * (i + 1),
            "cpu_total_us": 300.0 * (i + 1),
            "self_cuda_us": 50.0 * (i + 1),
            "cuda_total_us": 80.0 * (i + 1),
            "calls": 3 * (i + 1),
        }
        for i in range(6)
    ]
    lines = format_table(rows, layout="cuda", sort_by="cuda_time_total").split("\n")
    path = folder / "profile.txt"
    path.write_text("\n".join(lines[:6]) + "\n" + lines[6][: len(lines[6]) // 2], encoding="utf-8")
    return path
