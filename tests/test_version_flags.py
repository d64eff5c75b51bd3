"""Version answers from one table (issue 23 point 3): every flag graphdiag prints for a version
is one that version accepts, by the flag spans of ``diag/engines/flags.py``.

The versions are every version of ``tests/data/engine_defaults.yaml`` (read from the released
wheels) plus the flag spans' own boundaries (the first version of each row and the one just
before it), so a spec function that decides by a tuple of its own disagrees somewhere. The
printed text is the engine spec's (bucket, ceiling and graphs-off flags) and every remedy of
every rule rendered for a real run of that engine moved to that version.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

import gen.incidents as inc
from diag.advise.run_advice import advise_runs
from diag.api import analyze
from diag.engines import ENGINES
from diag.engines.flags import TABLES, accepts, version_text
from diag.facts.record import RunFacts
from diag.model import Snapshot
from diag.rules.metrics import run_metrics
from diag.rules.registry import RULES

TABLE = yaml.safe_load((Path(__file__).parent / "data" / "engine_defaults.yaml").read_text())
CAUSES = (None, "oom", "stream_capture_invalid", "unsupported_op", "distributed", "other")
# a flag on a command line (``--x-y``, ``--x-y=v``) or a key in a --compilation-config JSON
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
JSON_KEY = re.compile(r'"([a-z_]+)":')
# incidents whose runs reach the remedies of every rule (capture errors, squeeze, window)
INCIDENTS = {
    "vllm": ("vllm-capture-oom", "vllm-kv-squeeze", "vllm-out-of-window-metrics"),
    "sglang": ("sglang-capture-oom", "sglang-kv-squeeze", "sglang-out-of-window"),
}


def _boundaries(engine: str) -> set[str]:
    out: set[str] = set()
    for span in TABLES[engine].values():
        out.add(version_text(span.since))
        if span.since[-1] > 0:  # the release before the boundary
            out.add(version_text((*span.since[:-1], span.since[-1] - 1)))
        if span.until is not None:
            out.add(version_text(span.until))
    return out


def _versions(engine: str) -> list[str]:
    return sorted({str(r["version"]) for r in TABLE[engine]} | _boundaries(engine))


def named_flags(text: str) -> set[str]:
    """The flags and compilation-config keys a printed text names."""
    return set(FLAG.findall(text)) | set(JSON_KEY.findall(text))


def _refused(engine: str, version: str, text: str) -> list[str]:
    return sorted(f for f in named_flags(text) if not accepts(engine, f, version))


def test_named_flags_reads_the_printed_spellings() -> None:
    text = (
        "--cuda-graph-bs 1 8 --cuda-graph-max-bs 8; --cuda-graph-backend-decode=disabled; "
        '--compilation-config \'{"cudagraph_capture_sizes": [1], "max_cudagraph_capture_size": 1}\''
    )
    assert named_flags(text) == {
        "--cuda-graph-bs",
        "--cuda-graph-max-bs",
        "--cuda-graph-backend-decode",
        "--compilation-config",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
    }


@pytest.mark.parametrize(
    "engine,version", [(e, v) for e in ("vllm", "sglang") for v in _versions(e)]
)
def test_spec_flags_are_accepted_by_the_version(engine: str, version: str) -> None:
    spec = ENGINES[engine]
    notes: list[str] = []
    printed = [
        spec.bucket_flags(version, {}, [1, 8, 24], notes),
        spec.ceiling_flag(version, {}, 24),
        spec.ceiling_flag(version, {}, None),
        spec.graphs_off_flag(version, {}),
        spec.eager_flag,
        spec.concurrency_flag,
    ]
    for text in printed:
        assert not _refused(engine, version, text), (text, _refused(engine, version, text))
    if not printed[0]:  # no bucket flag for this version: the note says why
        assert notes


def test_sglang_list_flag_boundary_is_the_wheels() -> None:
    """sglang==0.4.2 has --cuda-graph-bs, 0.4.1.post4 does not; --cuda-graph-max-bs from
    0.3.5 (absent 0.3.4.post2): the spec emits exactly what the table accepts."""
    spec = ENGINES["sglang"]
    assert spec.bucket_flags("0.4.2", {}, [1, 8], []).startswith("--cuda-graph-bs 1 8")
    assert spec.bucket_flags("0.4.1.post4", {}, [1, 8], []) == "--cuda-graph-max-bs 8"
    assert spec.bucket_flags("0.3.4.post2", {}, [1, 8], []) == ""
    assert spec.ceiling_flag("0.3.5", {}, 8) == "--cuda-graph-max-bs 8"
    assert spec.ceiling_flag("0.3.4.post2", {}, 8) == ""


def _facts(engine: str, tmp: Path) -> list[tuple[RunFacts, list[Snapshot]]]:
    out = []
    for name in INCIDENTS[engine]:
        rep = analyze([str(inc.BUILDERS[name]().write(tmp))])
        out += [(r.facts, list(rep.snapshots)) for r in rep.runs if r.facts.backend == engine]
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_remedy_names_only_flags_the_version_accepts(engine: str, tmp_path: Path) -> None:
    """The run's facts moved to each version, then advice and metrics made the real way; the
    remedies a firing rule prints and every remedy the run's own numbers fill in."""
    base = _facts(engine, tmp_path)
    assert base
    checked = 0
    for version in _versions(engine):
        for facts, snaps in base:
            moved = dataclasses.replace(
                facts, config=dataclasses.replace(facts.config, version=version)
            )
            advice = advise_runs([moved], snaps).get(moved.run.id)
            m = run_metrics(moved, snaps, advice)
            for rule in RULES:
                printed = rule().remediation(m) if rule().fires(m) else []
                for remedy in rule.remedies:  # and every remedy the run's numbers fill in
                    for cause in CAUSES:
                        if remedy.applies(m, cause) and remedy.specific and remedy.specific(m):
                            printed.append(remedy.render(m))
                for text in printed:
                    checked += 1
                    bad = _refused(engine, version, text)
                    assert not bad, (rule.code, version, text, bad)
    assert checked
