"""The command line contract: outputs, exit codes, stdout/stderr separation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diag.cli import main
from diag.rules.registry import ALL_CODES
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"


def run(*args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    res = runner.invoke(main, list(args), catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0 and "graphdiag" in out


def test_exit_1_on_error_finding_and_json_on_stdout(tmp_path: Path) -> None:
    code, out, err = run(
        "analyze",
        str(INCIDENTS / "sglang-capture-oom"),
        "-o",
        str(tmp_path),
        "--no-html",
        "--format",
        "json",
    )
    assert code == 1
    doc = json.loads(out)
    assert doc["schema"] == "graphdiag.report/1"
    assert doc["runs"][0]["findings"][0]["code"] == "GD100"
    assert (tmp_path / "sglang-capture-oom.graphdiag.json").read_text() == out


def test_fail_on_levels(tmp_path: Path) -> None:
    target = str(INCIDENTS / "sglang-out-of-window")  # warnings only
    assert run("analyze", target, "-o", str(tmp_path), "--no-html")[0] == 0
    assert run("analyze", target, "-o", str(tmp_path), "--no-html", "--fail-on", "warning")[0] == 1
    assert (
        run(
            "analyze",
            str(INCIDENTS / "sglang-capture-oom"),
            "-o",
            str(tmp_path),
            "--no-html",
            "--fail-on",
            "never",
        )[0]
        == 0
    )


def test_text_summary_leads_with_findings_worst_first(tmp_path: Path) -> None:
    code, out, _ = run(
        "analyze", str(INCIDENTS / "sglang-out-of-window"), "-o", str(tmp_path), "--no-html"
    )
    lines = out.splitlines()
    doc = json.loads((tmp_path / "sglang-out-of-window.graphdiag.json").read_text())
    n = sum(len(r["findings"]) for r in doc["runs"])
    assert lines[0].startswith(f"{n} findings: ")  # the headline with totals
    assert lines[2].startswith("Findings")
    assert "GD110" in lines[3]
    # the last line names the file written (a path is never wrapped); the rest fits 100 cols
    assert lines[-1] == f"JSON report: {tmp_path / 'sglang-out-of-window.graphdiag.json'}"
    assert all(len(line) <= 100 for line in lines[:-1])
    assert "        1. " in out  # first remedy shown, numbered


def test_text_names_the_files_written_last(tmp_path: Path) -> None:
    code, out, err = run("analyze", str(INCIDENTS / "sglang-kv-squeeze"), "-o", str(tmp_path))
    html, js = (tmp_path / f"sglang-kv-squeeze.graphdiag.{s}" for s in ("html", "json"))
    assert out.splitlines()[-2:] == [f"HTML report: {html}", f"JSON report: {js}"]
    assert html.exists() and js.exists()
    # data formats keep stdout pure: the paths go to stderr
    code, out, err = run(
        "analyze", str(INCIDENTS / "sglang-kv-squeeze"), "-o", str(tmp_path), "--format", "json"
    )
    assert json.loads(out)["schema"] == "graphdiag.report/1"
    assert str(html) in err and str(js) in err


def test_text_shows_two_remedies_and_no_unknown_marker(tmp_path: Path) -> None:
    from diag.api import analyze
    from diag.render.text import render_text

    report = analyze([str(INCIDENTS / "sglang-kv-squeeze")])
    finding = report.findings[0]
    assert len(finding.remediation) >= 2
    text = render_text(report)
    flat = " ".join(text.split())
    for i, remedy in enumerate(finding.remediation[:2], start=1):
        assert f"{i}. {' '.join(remedy.split())}" in flat
    runs_part = text[text.index("Runs:") :]  # render's own lines (messages are the rules')
    assert "n/a" not in runs_part and "None" not in runs_part


def test_help_has_examples_exit_codes_stdin_and_fail_on() -> None:
    _, top, _ = run("--help")
    assert "Examples:" in top and "Exit codes:" in top and " - " in top
    _, ana, _ = run("analyze", "--help")
    for needle in ("Examples:", "Exit codes:", "--fail-on LEVEL", "or -", "stdin"):
        assert needle in ana, needle
    _, par, _ = run("parse", "--help")
    assert "Examples:" in par and "stderr" in par


def test_parse_says_what_it_wrote(tmp_path: Path) -> None:
    from diag.api import analyze

    target = INCIDENTS / "sglang-kv-squeeze"
    report = analyze([str(target)])
    tables = report.tables
    counts = {kind: len(tables[kind]) for kind in tables if len(tables[kind])}
    # and every run's decode steps as analyze classified them (kind decode_step)
    counts["decode_step"] = sum(len(r.facts.batches) for r in report.runs)
    assert counts["decode_step"] > 0
    out_file = tmp_path / "events.jsonl"
    code, out, err = run("parse", str(target), "-o", str(out_file))
    assert code == 0
    line = out.strip()
    rows = len(out_file.read_text().splitlines())
    assert line.startswith(f"wrote {out_file}: {rows:,} rows (")
    assert rows == sum(counts.values())
    for kind, n in counts.items():
        assert f"{kind} {n:,}" in line
    # to stdout: the rows are stdout, the summary goes to stderr
    code, out, err = run("parse", str(target))
    assert len(out.splitlines()) == rows and all(json.loads(x) for x in out.splitlines())
    assert err.strip().startswith("wrote stdout: ")
    code, out, err = run("parse", str(target), "-q")
    assert "wrote" not in err


def test_yaml_and_markdown_formats(tmp_path: Path) -> None:
    _, out, _ = run(
        "analyze",
        str(INCIDENTS / "sglang-out-of-window"),
        "-o",
        str(tmp_path),
        "--no-html",
        "--format",
        "yaml",
    )
    doc = yaml.safe_load(out)
    rec = doc["runs"][0]
    assert rec["graph_mode"] == "enabled" and rec["cuda_graph_max_bs"] == 32
    _, md, _ = run(
        "analyze",
        str(INCIDENTS / "sglang-out-of-window"),
        "-o",
        str(tmp_path),
        "--no-html",
        "--format",
        "markdown",
    )
    assert md.startswith("## graphdiag report") and "| warning | GD110 out-of-window |" in md


def test_unreadable_input_among_others_is_listed(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    code, out, err = run(
        "analyze",
        str(INCIDENTS / "sglang-healthy"),
        str(missing),
        "-o",
        str(tmp_path),
        "--no-html",
        "--format",
        "json",
    )
    assert code == 0
    inputs = {i["path"]: i for i in json.loads(out)["inputs"]}
    assert inputs[str(missing)]["status"] == "skipped"
    assert "no such file" in inputs[str(missing)]["reason"]
    assert "nope.log" in err and "nope.log" not in out.split('"inputs"')[0]


def test_nothing_readable_exits_2(tmp_path: Path) -> None:
    code, out, err = run("analyze", str(tmp_path / "missing.log"), "-o", str(tmp_path))
    assert code == 2 and out == "" and "no input could be read" in err


def test_rules_override_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("thresholds: {GD110: {min_eager_share: 0.9}}\ndisable: [GD170]\n")
    _, out, _ = run(
        "analyze",
        str(INCIDENTS / "sglang-out-of-window"),
        "-o",
        str(tmp_path),
        "--no-html",
        "--format",
        "json",
        "--rules",
        str(rules),
    )
    codes = {f["code"] for r in json.loads(out)["runs"] for f in r["findings"]}
    assert "GD110" not in codes and "GD170" not in codes


def test_bad_rules_file_is_a_usage_error(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("thresholds: {GD110: {no_such_threshold: 1}}\n")
    code, out, err = run(
        "analyze", str(INCIDENTS / "sglang-healthy"), "-o", str(tmp_path), "--rules", str(rules)
    )
    assert code == 2 and "no_such_threshold" in err


def test_rules_catalogue() -> None:
    code, out, _ = run("rules", "--format", "json")
    cat = json.loads(out)
    assert [r["code"] for r in cat] == list(ALL_CODES)
    assert all(r["doc"] and r["remediation"] for r in cat)
    # the catalogue is concrete text: no template left unfilled, no n/a / None
    blob = json.dumps(cat)
    assert "{" not in " ".join(rem["text"] for r in cat for rem in r["remediation"])
    assert "n/a" not in blob and "None" not in blob
    code, text, _ = run("rules")
    assert "GD110 out-of-window [warning]" in text


def test_parse_jsonl_and_csv(tmp_path: Path) -> None:
    code, out, _ = run("parse", str(INCIDENTS / "sglang-healthy"))
    rows = [json.loads(line) for line in out.splitlines()]
    kinds = {r["kind"] for r in rows}
    assert {"decode_batch", "capture_end", "config", "sizing"} <= kinds
    decode = [r for r in rows if r["kind"] == "decode_batch"]
    assert len(decode) == 80 and all("batch_size" in r and "line" in r for r in decode)
    csv_path = tmp_path / "e.csv"
    assert (
        run("parse", str(INCIDENTS / "sglang-healthy"), "--format", "csv", "-o", str(csv_path))[0]
        == 0
    )
    assert csv_path.read_text().splitlines()[0] == "kind,source,line,ts,rank,instance,data"


def _many_runs(root: Path) -> Path:
    """Every fixture incident's logs in one folder, each file its own run."""
    folder = root / "many"
    folder.mkdir()
    for incident in sorted(p for p in INCIDENTS.iterdir() if p.is_dir()):
        for log in sorted(incident.glob("*.log")):
            (folder / f"{incident.name}-{log.name}").write_bytes(log.read_bytes())
    return folder


def test_text_headline_totals_for_several_runs(tmp_path: Path) -> None:
    folder = _many_runs(tmp_path)
    code, out, _ = run("analyze", str(folder), "-o", str(tmp_path / "out"), "--no-html")
    doc = json.loads((tmp_path / "out" / "many.graphdiag.json").read_text())
    runs = doc["runs"]
    findings = [f for r in runs for f in r["findings"]]
    errors = sum(1 for f in findings if f["severity"] == "error")
    hit = sum(1 for r in runs if r["findings"])
    head = out.splitlines()[0]
    assert head.startswith(f"{len(findings)} findings: {errors} error")
    assert head.endswith(f" in {hit} of {len(runs)} runs")


def test_skipped_and_runless_inputs_on_stderr_notes_in_summary(tmp_path: Path) -> None:
    """analyze names on stderr every input it skipped or that made no run, with why; the
    notes reading left on a run's input (NUL bytes dropped) reach the text summary."""
    folder = tmp_path / "in"
    folder.mkdir()
    log = (INCIDENTS / "sglang-out-of-window" / "server.log").read_bytes()
    lines = log.split(b"\n")
    lines[3] = lines[3][:10] + b"\x00\x00" + lines[3][10:]
    (folder / "server.log").write_bytes(b"\n".join(lines))
    (folder / "notes.md").write_text("# not a log\n")
    (folder / "other.log").write_text("hello\nworld\n")
    code, out, err = run("analyze", str(folder), "-o", str(tmp_path / "out"), "--no-html")
    doc = json.loads((tmp_path / "out" / "in.graphdiag.json").read_text())
    by_name = {Path(i["path"]).name: i for i in doc["inputs"]}
    assert f"skipped: {by_name['notes.md']['path']}: {by_name['notes.md']['reason']}" in err
    other = [ln for ln in err.splitlines() if "other.log" in ln]
    assert len(other) == 1 and "made no run" in other[0] and "2 lines" in other[0]
    assert "other.log" in out  # and in the summary's inputs section
    notes = by_name["server.log"]["notes"]
    assert notes, "the NUL bytes left no note on the input"
    flat = " ".join(out.split())
    assert all(
        " ".join(f"note: {by_name['server.log']['path']}: {n}".split()) in flat for n in notes
    )


def test_a_long_evidence_path_stays_with_its_at(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    src = INCIDENTS / "sglang-capture-oom" / "server.log"
    (deep / "server.log").write_bytes(src.read_bytes())
    code, out, _ = run("analyze", str(deep / "server.log"), "-o", str(tmp_path / "o"), "--no-html")
    at = [ln for ln in out.splitlines() if ln.strip().startswith("at ")]
    assert at and all(ln.strip().startswith(f"at {deep / 'server.log'}:") for ln in at)
    assert not any(ln.strip() == "at" for ln in out.splitlines())


def _examples_and_codes(help_text: str) -> tuple[list[str], set[int]]:
    """The example command lines and the exit codes a --help text documents."""
    examples, in_examples = [], False
    for line in help_text.splitlines():
        if line.strip() == "Examples:":
            in_examples = True
            continue
        if in_examples:
            if not line.strip():
                break
            examples.append(line.strip())
    tail = help_text[help_text.index("Exit codes:") :] if "Exit codes:" in help_text else ""
    codes = {int(c) for c in re.findall(r"(?<![\w/.-])(\d{1,3})(?![\w.%-])", tail)}
    return examples, codes


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_help_has_examples_and_exit_codes(command: str, tmp_path: Path) -> None:
    """Each command's --help has examples that call that very command, and documents exit
    codes 0 and 2, which the command then gives: 0 on a fixture incident (rules: none), 2 on
    a usage error."""
    code, text, _ = run(command, "--help")
    assert code == 0
    examples, codes = _examples_and_codes(text)
    assert examples, f"{command} --help has no examples"
    assert all(f"graphdiag {command}" in ex or "python -c" in ex for ex in examples), examples
    assert {0, 2} <= codes, f"{command} --help documents exit codes {codes}"
    incident = str(INCIDENTS / "sglang-out-of-window")
    ok_args = {
        "analyze": [incident, "-o", str(tmp_path), "--no-html", "-q"],
        "parse": [incident, "-o", str(tmp_path / "e.jsonl"), "-q"],
        "recommend": [incident, "-q"],
        "compare": [incident, incident, "-q"],
        "rules": [],
    }[command]
    assert run(command, *ok_args)[0] == 0
    assert run(command, "--no-such-option")[0] == 2
