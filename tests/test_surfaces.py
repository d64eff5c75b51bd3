"""What a new user meets first (issue 38): runs named apart on every surface, reports
written as a set, every input accounted for, a CLI that forgives."""

from __future__ import annotations

import errno
import html as html_mod
import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import diag.output
from diag.cli import main
from diag.report import run_labels
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
SEVERAL = ["sglang-capture-oom", "vllm-capture-oom", "sglang-healthy", "vllm-kv-squeeze"]


def run(*args: str, stdin: str | bytes | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


# ------------------------------------------------------------------ 1. run names
def test_labels_are_the_shortest_unique_suffix() -> None:
    ids = [
        "logs/06-sglang-oom/server.log#1",
        "logs/07-vllm/server.log#1",
        "logs/07-vllm/server.log#2",
        "other/06-sglang-oom/server.log#1",
        "-#1",
        "/abs/rank1.log#1",
    ]
    got = run_labels(ids)
    assert got == {
        "logs/06-sglang-oom/server.log#1": "logs/06-sglang-oom/server.log#1",
        "logs/07-vllm/server.log#1": "07-vllm/server.log#1",
        "logs/07-vllm/server.log#2": "07-vllm/server.log#2",
        "other/06-sglang-oom/server.log#1": "other/06-sglang-oom/server.log#1",
        "-#1": "stdin",
        "/abs/rank1.log#1": "rank1.log#1",
    }


@pytest.fixture(scope="module")
def several(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One analysis of four incidents, every log called server.log: each surface."""
    out = tmp_path_factory.mktemp("several")
    paths = [str(INCIDENTS / n) for n in SEVERAL]
    got = {}
    for fmt in ("markdown", "yaml", "text"):
        code, stdout, _ = run("analyze", *paths, "-o", str(out), "--format", fmt, "-q")
        assert code in (0, 1)
        got[fmt] = stdout
    got["json"] = (out / "incident.graphdiag.json").read_text()
    got["html"] = (out / "incident.graphdiag.html").read_text()
    return got


def _expected() -> list[str]:
    return [f"{n}/server.log#1" for n in SEVERAL]


def test_json_labels_name_every_run_apart(several: dict[str, str]) -> None:
    runs = json.loads(several["json"])["runs"]
    assert sorted(r["label"] for r in runs) == sorted(_expected())
    for r in runs:
        assert r["id"].endswith(r["label"])


def test_markdown_and_ticket_name_every_run_apart(several: dict[str, str]) -> None:
    md = several["markdown"]
    verdicts = re.findall(r"^- (\S+): verdict", md, re.M)
    assert sorted(verdicts) == sorted(_expected())
    summaries = re.findall(r"<summary>GD\d+ \((.*?)\)</summary>", md)
    assert summaries and set(summaries) <= set(_expected())
    ticket = yaml.safe_load(several["yaml"])
    assert sorted(r["run"] for r in ticket["runs"]) == sorted(_expected())


def test_html_runs_table_findings_and_verdicts_name_every_run_apart(
    several: dict[str, str],
) -> None:
    page = several["html"]
    table = page[page.index('<table class="runs"') :]
    table = table[: table.index("</table>")]
    names = [
        html_mod.unescape(re.sub(r"<[^>]+>", "", m))
        for m in re.findall(r'<td class="name">(.*?)</td>', table)
    ]
    assert sorted(names) == sorted(_expected())
    sections = re.findall(r'<span class="name" title="[^"]*">(.*?)</span>', page)
    assert sorted(html_mod.unescape(re.sub(r"<[^>]+>", "", s)) for s in sections) == sorted(
        _expected()
    )
    findings = page[page.index('<table class="findings"') :]
    findings = findings[: findings.index("</table>")]
    named = re.findall(r'<td class="name"><a href="#run-\d+">(.*?)</a>', findings)
    named += re.findall(r'<li><a href="#run-\d+">(.*?)</a>', findings)
    named += re.findall(r'title="([^"]*)">run \d+</a>', findings)
    clean = {html_mod.unescape(re.sub(r"<[^>]+>", "", n)) for n in named}
    assert clean and clean <= set(_expected())


def test_stdin_run_is_named_stdin(tmp_path: Path) -> None:
    log = (INCIDENTS / "sglang-capture-oom" / "server.log").read_bytes()
    code, out, _ = run(
        "analyze", "-", "-o", str(tmp_path), "--format", "json", "--no-html", "-q", stdin=log
    )
    assert code == 1
    assert [r["label"] for r in json.loads(out)["runs"]] == ["stdin"]
    code, out, _ = run("analyze", "-", "-o", str(tmp_path), "--format", "markdown", stdin=log)
    assert "-#1" not in out and "stdin" in out


# ------------------------------------------------------------------ 2. reports as a set

ONE = str(INCIDENTS / "sglang-healthy")


def _tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_signal_during_the_renames_leaves_both_reports_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT lands after the first rename: it waits until the second is done, and the
    message names both files (never "no report written" beside a new JSON)."""
    out = tmp_path / "reports"
    real = os.replace
    calls: list[str] = []

    def replace_then_signal(src: str, dst: Path) -> None:
        real(src, dst)
        calls.append(str(dst))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(diag.output.os, "replace", replace_then_signal)
    code, out_text, err = run("analyze", ONE, "-o", str(out), "-q")
    assert code == 130 and len(calls) == 2
    names = sorted(p.name for p in out.iterdir())
    assert names == ["sglang-healthy.graphdiag.html", "sglang-healthy.graphdiag.json"]
    assert "written whole" in err and "no report written" not in err
    for name in names:
        assert name in err


def test_a_failed_second_rename_takes_the_first_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "reports"
    real = os.replace
    calls: list[str] = []

    def second_fails(src: str, dst: Path) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(diag.output.os, "replace", second_fails)
    code, _, err = run("analyze", ONE, "-o", str(out), "-q")
    assert code == 2
    assert list(out.iterdir()) == []
    assert err.count("\n") == 1 and "Input/output error" in err and "Traceback" not in err


def test_full_disk_is_one_line_exit_2_and_nothing_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    (out / "sglang-healthy.graphdiag.json").write_text("old json")
    (out / "sglang-healthy.graphdiag.html").write_text("old html")
    real = os.fsync
    calls: list[int] = []

    def full_on_second(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(diag.output.os, "fsync", full_on_second)
    code, stdout, err = run("analyze", ONE, "-o", str(out))
    assert code == 2 and stdout == ""
    lines = err.strip().splitlines()
    assert lines == [lines[0]] and "No space left on device" in lines[0]
    assert str(out) in lines[0] and "no report written" in lines[0]
    assert (out / "sglang-healthy.graphdiag.json").read_text() == "old json"
    assert (out / "sglang-healthy.graphdiag.html").read_text() == "old html"
    assert _tmp_files(out) == []


def test_a_folder_that_cannot_be_made_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, stdout, err = run("analyze", ONE, "-o", str(blocker / "reports"))
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{blocker} is a file, not a folder" in err


def test_compare_into_a_folder_that_cannot_be_made_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, stdout, err = run("compare", ONE, ONE, "--format", "html", "-o", str(blocker / "c.html"))
    assert code == 2 and stdout == ""
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and f"{blocker} is a file, not a folder" in last


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        code, _, err = run("analyze", ONE, "-o", str(out))
    finally:
        out.chmod(0o755)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "Permission denied" in err and list(out.iterdir()) == []


def test_a_read_only_folder_simulated_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root (CI containers) the kernel lets every write through: the refusal is simulated
    where the writer makes its temporary."""

    def refused(*_: object, **__: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(diag.output.tempfile, "mkstemp", refused)
    code, stdout, err = run("analyze", ONE, "-o", str(tmp_path / "ro"))
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and "Permission denied" in err


def test_stale_temporaries_of_killed_runs_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    dead = 2**22 + 12345  # above Linux's default pid_max: no such process
    stale = out / f".incident.graphdiag.json.{dead}.k3j2h1.tmp"
    stale.write_text("half")
    old_style = out / ".incident.graphdiag.html.a8sd7f6.tmp"
    old_style.write_text("half")
    os.utime(old_style, (1, 1))
    live = out / f".incident.graphdiag.json.{os.getppid()}.zz9.tmp"  # a live writer's
    live.write_text("being written")
    other = out / ".notes.txt.tmp"  # not ours
    other.write_text("keep")
    code, _, _ = run("analyze", ONE, "-o", str(out), "-q")
    assert code == 0
    assert _tmp_files(out) == sorted([live.name, other.name])


# ------------------------------------------------------------------ 3. every input accounted for
def test_a_folder_of_python_files_says_why(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("import os\n")
    code, out, err = run("analyze", str(tmp_path), "-o", str(tmp_path / "o"))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert any("a.py: not a log (.py file" in line for line in lines)
    assert any("b.py: not a log (.py file" in line for line in lines)
    assert "2 not a log (.py)" in lines[-1]


def test_an_empty_folder_says_it_is_empty(tmp_path: Path) -> None:
    empty = tmp_path / "logs"
    empty.mkdir()
    code, _, err = run("analyze", str(empty), "-o", str(tmp_path / "o"))
    assert code == 2
    assert f"{empty}: empty folder: no files in it" in err
    assert "1 empty folder" in err.strip().splitlines()[-1]


def test_each_kind_of_nothing_has_its_reason(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "bin.log").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "plain.log").write_text("hello world\n")
    (tmp_path / "gone.log").symlink_to(tmp_path / "nowhere")
    code, _, err = run("analyze", str(tmp_path), "-o", str(tmp_path / "o"))
    assert code == 2
    by_file = {
        name: line
        for line in err.splitlines()
        for name in ("notes.md", "empty.log", "bin.log", "plain.log", "gone.log")
        if f"/{name}:" in line
    }
    assert "not a log" in by_file["notes.md"]
    assert "empty file" in by_file["empty.log"]
    assert "binary" in by_file["bin.log"]
    assert "read, but made no run" in by_file["plain.log"]
    assert by_file["gone.log"].startswith("graphdiag: skipped:")
    last = err.strip().splitlines()[-1]
    for kind in ("not a log (.md)", "binary", "empty", "read but no engine line"):
        assert kind in last


def test_many_skipped_files_ten_on_stderr_all_in_the_json(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "server.log").write_bytes((INCIDENTS / "sglang-healthy" / "server.log").read_bytes())
    for i in range(14):
        (folder / f"tool{i:02}.py").write_text("x = 1\n")
    code, _, err = run("analyze", str(folder), "-o", str(tmp_path / "o"), "-q")
    assert code == 0
    named = [line for line in err.splitlines() if ".py: not a log" in line]
    assert len(named) == 10 and "and 4 more inputs" in err
    doc = json.loads((tmp_path / "o" / "in.graphdiag.json").read_text())
    py = [i for i in doc["inputs"] if i["path"].endswith(".py")]
    assert len(py) == 14 and all(i["reason"].startswith("not a log") for i in py)


# ------------------------------------------------------------------ 4. a CLI that forgives
@pytest.mark.parametrize(
    ("given", "meant"), [("md", "markdown"), ("MD", "markdown"), ("yml", "yaml"), ("txt", "text")]
)
def test_format_aliases(tmp_path: Path, given: str, meant: str) -> None:
    a = run("analyze", ONE, "-o", str(tmp_path / "a"), "--format", given, "-q", "--no-html")
    b = run("analyze", ONE, "-o", str(tmp_path / "b"), "--format", meant, "-q", "--no-html")
    assert a[0] == b[0] == 0
    strip = re.compile(r"generated \S+|" + re.escape(str(tmp_path)) + r"/[ab]")
    assert strip.sub("", a[1]) == strip.sub("", b[1]) and a[1]


def test_compare_takes_htm_and_an_unknown_format_is_refused(tmp_path: Path) -> None:
    log = str(INCIDENTS / "sglang-healthy")
    code, out, _ = run("compare", log, log, "--format", "htm")
    assert code == 0 and out.lstrip().startswith("<!DOCTYPE html>")
    code, _, err = run("analyze", ONE, "--format", "markdwn")
    assert code == 2 and "markdwn" in err


def test_rules_by_code_text_and_json() -> None:
    code, out, _ = run("rules", "gd120", "GD140")
    assert code == 0
    heads = re.findall(r"^(GD\d+) ", out, re.M)
    assert heads == ["GD120", "GD140"]
    code, out, _ = run("rules", "GD100", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and [r["code"] for r in doc] == ["GD100"]


def test_unknown_rule_code_is_one_line_exit_2() -> None:
    code, out, err = run("rules", "GD120", "GD999")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "GD999" in err


def test_the_catalogue_shows_users_text_only() -> None:
    _, text, _ = run("rules")
    _, js, _ = run("rules", "--format", "json")
    for shown in (text, js):
        assert "Fires::" not in shown and "Near miss" not in shown
        assert "incident: " not in shown and "detection: " not in shown
        assert "facts/record.py" not in shown
    from diag.rules.registry import RULES

    # the developers' examples stay in the docstrings, where the docs test reads them
    assert any(r.examples() for r in RULES)


BENCH = sorted(p for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh"))


@pytest.mark.parametrize("script", BENCH, ids=[p.name for p in BENCH])
def test_every_bench_script_has_help_and_a_readme_line(script: Path) -> None:
    import subprocess
    import sys

    cmd = ["bash", str(script)] if script.suffix == ".sh" else [sys.executable, str(script)]
    res = subprocess.run(
        [*cmd, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert res.returncode == 0, res.stderr[-500:]
    assert res.stdout.strip() and "Traceback" not in res.stderr
    if script.suffix == ".py":
        import ast

        doc = ast.get_docstring(ast.parse(script.read_text())) or ""
        said = res.stdout.lstrip()
        assert said.startswith("usage:") or (doc and said.startswith(doc.splitlines()[0]))
    else:
        assert "usage" in res.stdout.lower() or script.stem in res.stdout
    assert f"`{script.name}" in (ROOT / "bench" / "README.md").read_text()


def test_parse_names_its_output_folder_cleanly(tmp_path: Path) -> None:
    code, out, _ = run(
        "parse", ONE, "--format", "parquet", "-o", str(tmp_path / "events") + "/", "-q"
    )
    assert code == 0
    code, out, _ = run("parse", ONE, "--format", "parquet", "-o", str(tmp_path / "ev") + "/")
    assert code == 0 and f"wrote {tmp_path / 'ev'}/ (one folder" in out and "//" not in out


# ------------------------------------------------------------------ 6. a true README
def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    m = re.search(r'^TEST_COMMAND="([^"]+)"$', ci, re.M)
    assert m, ".ci/run lost its TEST_COMMAND line"
    assert 'bash -c "$TEST_COMMAND"' in ci
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    block = next((b for b in blocks if "pytest" in b), "")
    lines = block.strip().splitlines()
    assert lines[-1] == m.group(1), "README's test command differs from .ci/run's"
    installs = re.findall(r"python -m pip install -q ('[^']+')", ci)
    assert installs and f"pip install {installs[-1]}" in block
    assert "python setup.py -q build_ext --inplace" in block
    assert re.search(r"apt-get install [^\n]*\bchromium\b", block)
    # what .ci/run installs with apt, the README's apt line installs too
    for pkg in ("chromium", "libasan8", "libubsan1"):
        assert pkg in ci and pkg in block


# ------------------------------------------------------------------ 5. page details
def _report(*incidents: str) -> object:
    from diag.api import analyze

    return analyze([str(INCIDENTS / i) for i in incidents])


def test_frontier_lists_each_set_once() -> None:
    report = _report("sglang-oversized-window", "sglang-healthy", "sglang-graph-downgraded")
    for r in report.runs:  # type: ignore[attr-defined]
        rows = r.to_dict()["recommendation"]["frontier"]
        sets = [tuple(x["sizes"]) for x in rows]
        assert len(sets) == len(set(sets)), (r.label, [x["k"] for x in rows])


def test_bucket_set_chart_is_fitted_to_the_candidates() -> None:
    """sglang-oversized-window's 52-size set against candidates of 2-4 sizes (the advice now
    changes it: the capture seconds saved are priced exactly, issue 34): the K axis spans the
    candidates, the current set is a level line, not a point at K=52."""
    from diag.render.advice_plots import frontier_figure

    report = _report("sglang-oversized-window")
    advice = report.runs[0].advice  # type: ignore[attr-defined]
    fig = frontier_figure(advice).to_dict()
    ks = [x for tr in fig["data"] if tr.get("type") == "bar" for x in _values(tr["x"])]
    lo, hi = fig["layout"]["xaxis"]["range"]
    assert max(ks) < 10 and hi - lo <= 2 * (max(ks) - min(ks) + 1)
    assert all(max(_values(tr.get("x", [0]))) < 10 for tr in fig["data"])
    texts = [a.get("text", "") for a in fig["layout"].get("annotations", [])]
    assert any(t.startswith("current set (K=52)") for t in texts)


def _values(v: object) -> list[float]:
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return [float(x) for x in v]  # type: ignore[union-attr]


def test_gd120_says_the_graph_memory_once() -> None:
    for inc in ("sglang-kv-squeeze", "issue24-vllm-squeezed-small-batches"):
        report = _report(inc)
        msgs = [f.message for f in report.findings if f.code == "GD120"]  # type: ignore[attr-defined]
        assert msgs
        for m in msgs:
            figures = re.findall(r"\d+(?:\.\d+)? GiB \(measured at capture\)", m)
            assert len(figures) == len(set(figures)), m


def test_capture_oom_memory_chart_shows_capacity_free_and_the_failed_allocation() -> None:
    from diag.render.memory_plots import memory_budget_rows, memory_figure, oom_capacity

    for inc, tried, free, cap in (
        ("sglang-capture-oom", 448 / 1024, 301 / 1024, 79.19),
        ("vllm-capture-oom", 1.0, 123 / 1024, 79.19),
    ):
        run_ = _report(inc).runs[0]  # type: ignore[attr-defined]
        facts = run_.facts
        rows = memory_budget_rows(
            facts.tables["sizing"], run_.record, facts.tables["capture_end"], []
        )
        oom = dict(rows)[next(label for label, _ in rows if label.startswith("capture OOM"))]
        assert oom["allocation that failed"] == pytest.approx(tried)
        assert oom["free at the OOM"] == pytest.approx(free)
        assert oom_capacity(run_.record) == pytest.approx(cap)
        fig = memory_figure(rows, oom_capacity(run_.record)).to_dict()
        shapes = fig["layout"].get("shapes", [])
        assert any(s.get("x0") == pytest.approx(cap) for s in shapes)


def test_operator_names_cut_alike_are_told_apart(tmp_path: Path) -> None:
    from gen.profiler_tables import format_table

    stem = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    rows = [
        {
            "name": f"{stem}_{tail}",
            "self_cpu_us": 10.0,
            "cpu_total_us": 12.0,
            "self_cuda_us": 100.0 * (i + 1),
            "cuda_total_us": 100.0 * (i + 1),
            "calls": 3,
        }
        for i, tail in enumerate(("execute_segment_k_off", "execute_segment_k_on", "splitk"))
    ]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "server.log").write_bytes((INCIDENTS / "sglang-healthy" / "server.log").read_bytes())
    (folder / "profile.txt").write_text(
        format_table(rows, layout="cuda", sort_by="cuda_time_total")
    )
    code, _, _ = run("analyze", str(folder), "-o", str(tmp_path / "o"), "-q")
    page = (tmp_path / "o" / "in.graphdiag.html").read_text()
    cells = [
        html_mod.unescape(re.sub(r"<[^>]+>", "", c))
        for c in re.findall(r'<td class="name">(.*?)</td>', page)
    ]
    cells = [c for c in cells if c.startswith("sm90_xmma")]
    assert len(cells) == 3 and len(set(cells)) == 3, cells
