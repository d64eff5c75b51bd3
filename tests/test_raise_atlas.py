"""The raise-site atlas (diag/engines/data/raise_atlas.json): every engine site, pasted three ways.

Each site's template is rendered with plausible values and pasted as a user brings it: (1) the
bare exception line, (2) the last three traceback lines with the site's real frame, (3) behind a
process prefix of its engine. A capture site must be a capture failure (GD100) of its class in
every form; a site outside capture code (weight loading, tokenizer, requests, KV sizing, ports)
must not be one, and must still be an engine-error run, never "nothing recognised".
The atlas itself is generated from the wheels (tools/gen_raise_atlas.py; ``--check`` by hand:
no wheels in CI), so here only its shape and its stamp are checked.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from diag.api import analyze
from diag.engines import atlas
from diag.engines.errors import ERROR_CLASSES, judge
from diag.engines.phases import CAPTURE_PHASES, place
from diag.rules.causes import cause_of

FORMS = ("bare", "frames", "prefixed")
VALUES = ("FULL", "16", "FlashInferBackend", "torch.bfloat16", "3", "decode")


def paste(site: atlas.Site, form: str) -> str:
    """The site's message as one of the three pastes."""
    msg = site.render(VALUES)
    head = f"{site.exc_type}: {msg}" if site.exc_type else msg
    if form == "bare":
        return head + "\n"
    if form == "frames" and site.level == "advice":
        # an advice line is no raise: its paste is the block's tail (SGLang's items 3-4 and
        # "Open an issue" under a cut traceback), the lines before it in its block included
        block = [
            a
            for a in atlas.sites()
            if a.level == "advice"
            and a.path == site.path
            and site.line - 2 <= a.line <= site.line
            and a.package == site.package
        ]
        return "".join(a.render(VALUES) + "\n" for a in sorted(block, key=lambda a: a.line))
    if form == "frames":
        func = site.func.rsplit(".", 1)[-1] or "<module>"
        call = f"raise {site.exc_type}(msg)" if site.exc_type else "logger.error(msg)"
        frame = (
            f'  File "/usr/local/lib/python3.12/site-packages/{site.path}", '
            f"line {site.line}, in {func}\n    {call}\n"
        )
        return frame + head + "\n"
    if site.package.startswith("sglang"):
        prefix = "[2026-06-01 12:00:00 TP0] "
    else:
        prefix = "(EngineCore_DP0 pid=123) ERROR 06-01 12:00:00 [core.py:123] "
    return "".join(prefix + ln + "\n" for ln in head.split("\n"))


def _run(tmp: Path, texts: dict[str, str]) -> dict[str, tuple[str | None, bool, int]]:
    """name -> (capture error class, GD100 raised, runs) for each paste, in one analysis."""
    paths = {}
    for name, text in texts.items():
        p = tmp / f"{name}.log"
        p.write_text(text, encoding="utf-8")
        paths[str(p)] = name
    report = analyze(list(paths), generated_at="fixed")
    out: dict[str, tuple[str | None, bool, int]] = {n: (None, False, 0) for n in texts}
    for run in report.runs:
        src = run.facts.tables["error"]["source"]
        names = {paths.get(str(s)) for s in set(src)} if len(src) else set()
        err = run.record.to_json()["capture_error"]
        for n in names - {None}:
            cls, gd, k = out[n]  # type: ignore[index]
            out[n] = (  # type: ignore[index]
                cls or (err["class"] if err else None),
                gd or any(f.code == "GD100" for f in run.findings),
                k + 1,
            )
    return out


def _frame_elsewhere(site: atlas.Site) -> bool:
    """Whether the site's own frame places it in a phase that is not capture (a graph-mode
    check raised from ``execute_model``: the frame says serving, the words say graph)."""
    func = site.func.rsplit(".", 1)[-1]
    phase = place([f'File "/x/site-packages/{site.path}", line {site.line}, in {func}'])
    return phase is not None and phase not in CAPTURE_PHASES


def _levelled(site: atlas.Site) -> bool:
    """Whether the engine's prefix prints the level (vLLM's does, SGLang's does not)."""
    return not site.package.startswith("sglang")


def _sites(capture: bool) -> list[atlas.Site]:
    if capture:
        return [s for s in atlas.sites() if s.capture and s.level != "warning"]
    return [s for s in atlas.sites() if s.scope == "outside" and s.level != "warning"]


def _ids(sites: list[atlas.Site]) -> list[str]:
    return [s.source.split(":", 1)[1] for s in sites]


def _chunks(sites: list[atlas.Site], n: int) -> list[list[atlas.Site]]:
    return [sites[i : i + n] for i in range(0, len(sites), n)]


CAPTURE = _sites(True)
OUTSIDE = _sites(False)


def test_atlas_shape_and_stamp() -> None:
    """Enough sites of every engine, known classes, citations, and the stamp of its rows."""
    raw = json.loads((atlas.DATA / "raise_atlas.json").read_text(encoding="utf-8"))
    body = json.dumps(raw["sites"], sort_keys=True).encode()
    assert hashlib.sha256(body).hexdigest() == raw["sha256"], "edited by hand: regenerate"
    assert {w["file"].split("-")[0] for w in raw["wheels"]} >= {"vllm", "sglang"}
    by_pkg = Counter(s.package for s in CAPTURE)
    assert by_pkg["vllm"] >= 50 and by_pkg["sglang"] >= 100 and by_pkg["vllm-ascend"] >= 5
    assert len(OUTSIDE) >= 300
    for s in atlas.sites():
        assert s.error_class in ERROR_CLASSES and s.source.count(":") >= 2, s
        assert len("".join(s.parts).strip()) >= 12, s


@pytest.mark.parametrize("chunk", _chunks(CAPTURE, 40), ids=lambda c: _ids(c)[0])
def test_capture_sites_are_capture_failures_of_their_class(
    chunk: list[atlas.Site], tmp_path: Path
) -> None:
    texts = {f"{i}-{f}": paste(s, f) for i, s in enumerate(chunk) for f in FORMS}
    got = _run(tmp_path, texts)
    bad = []
    for i, s in enumerate(chunk):
        for f in FORMS:
            cls, gd100, runs = got[f"{i}-{f}"]
            if f == "frames" and _frame_elsewhere(s):
                continue  # its own frame places it outside capture: conflicting evidence,
                # weighed by the capture attribution (test_frame_conflicts_are_few)
            if not (gd100 and cls == s.error_class and runs):
                bad.append((f, s.source, cls, s.error_class, gd100, s.render(VALUES)[:80]))
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.parametrize("chunk", _chunks(OUTSIDE, 80), ids=lambda c: _ids(c)[0])
def test_outside_sites_are_engine_errors_not_capture_failures(
    chunk: list[atlas.Site], tmp_path: Path
) -> None:
    texts = {f"{i}-{f}": paste(s, f) for i, s in enumerate(chunk) for f in FORMS}
    got = _run(tmp_path, texts)
    bad = []
    for i, s in enumerate(chunk):
        for f in FORMS:
            cls, gd100, runs = got[f"{i}-{f}"]
            # a log call's bare message says nowhere that it is an error (no exception name,
            # and SGLang's prefix prints no level): it must only not be a capture failure
            said = s.exc_type is not None or f == "frames" or (f == "prefixed" and _levelled(s))
            if gd100 or cls is not None or (said and not runs):
                bad.append((f, s.source, cls, gd100, runs, s.render(VALUES)[:80]))
    assert not bad, "\n".join(map(str, bad))


def test_site_class_and_cause_reach_the_verdict() -> None:
    """A capture site's text is capture-explicit, with the site's class and cause, and the
    remedy cause follows the site (custom all-reduce sites: ``custom_all_reduce``)."""
    for s in CAPTURE:
        text = f"{s.exc_type or 'Error'}: {s.render(VALUES)}"
        v = judge(text)
        assert v.capture and v.site is not None, s.source
    ar = [s for s in CAPTURE if s.cause == "custom_all_reduce"]
    assert ar, "the custom all-reduce capture paths are in the atlas"
    for s in ar:
        v = judge(s.render(VALUES))
        assert v.cause == "custom_all_reduce"
        assert cause_of(v.error_class, s.render(VALUES)) == "custom_all_reduce"


def test_a_longer_message_of_another_site_is_not_mistaken() -> None:
    """Templates match as a whole: a text holding only a template's first words is no hit."""
    s = next(s for s in CAPTURE if len(s.parts) >= 2 and len(s.parts[-1].strip()) >= 8)
    assert s not in atlas.matches(s.parts[0])


def test_frame_conflicts_are_few() -> None:
    """The capture sites whose own frame names another phase stay the exception."""
    conflicts = [s.source for s in CAPTURE if _frame_elsewhere(s)]
    assert len(conflicts) <= len(CAPTURE) // 50, conflicts


def test_capture_guarded_branches_are_read_anywhere(tmp_path: Path) -> None:
    """The generator's rule (tools/gen_raise_atlas.py CAPTURING): a raise in the branch a
    "stream is capturing" test opens, or ``assert not capturing(), msg``, is a capture site in
    any module of the package (unsupported_op unless its words name another class); the other
    branch, and a def nested under the branch, are not."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "gen_raise_atlas", Path(__file__).resolve().parent.parent / "tools" / "gen_raise_atlas.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # its dataclasses look their module up
    spec.loader.exec_module(gen)
    mod = tmp_path / "flashinfer" / "ops" / "kern.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(
        "import torch\n"
        "def run(x):\n"
        "    if torch.cuda.is_current_stream_capturing():\n"
        "        raise RuntimeError('the kernel plan must be built before CUDA graph capture')\n"
        "    else:\n"
        "        raise RuntimeError('the kernel plan is stale for this batch geometry now')\n"
        "def grow(ws):\n"
        "    assert not _is_capturing(), 'the workspace cannot grow while a stream is recorded'\n"
        "    if not torch.cuda.is_current_stream_capturing():\n"
        "        raise ValueError('an eager-only workspace path was given a bad tensor')\n"
        "    if x and get_is_capture_mode():\n"
        "        def later():\n"
        "            raise RuntimeError('a nested helper defined under the capture branch')\n"
        "        raise RuntimeError('out of memory growing the workspace while capturing')\n",
        encoding="utf-8",
    )
    sites, _, _, _ = gen.scan("flashinfer-python==0.0.0", tmp_path)
    got = {s.template: (s.capture, s.error_class) for s in sites}
    assert got == {
        "the kernel plan must be built before CUDA graph capture": (True, "unsupported_op"),
        "the workspace cannot grow while a stream is recorded": (True, "unsupported_op"),
        "out of memory growing the workspace while capturing": (True, "oom"),
    }


WARNED = [s for s in atlas.sites() if s.level == "warning" and s.capture]
CONFIG_WARNINGS = [
    s for s in atlas.sites() if s.level == "warning" and not s.capture and s.scope == "capture_code"
]


def _warning_line(site: atlas.Site, text: str) -> str:
    if site.package.startswith("sglang"):
        return f"[2026-06-01 12:00:00 TP0] {text}\n"
    return f"(EngineCore_DP0 pid=123) WARNING 06-01 12:00:00 [wrapper.py:102] {text}\n"


def test_warned_capture_failures_are_capture_failures(tmp_path: Path) -> None:
    """A warning whose words say a capture failed (the engine caught it and goes on without
    that graph: vllm-omni's model-side graph wrappers, SGLang's DSpark accept graph) is a
    capture failure, with the warning's reason, as its engine prints it and pasted bare; a
    capture-code warning that says no failure (a size truncated, a mode changed) is not."""
    from diag.parsers.traceback import WARNED_FAILURE

    assert len(WARNED) >= 15 and {s.package for s in WARNED} >= {"vllm-omni", "sglang"}
    texts = {}
    for i, s in enumerate(WARNED):
        texts[f"w{i}-prefixed"] = _warning_line(s, s.render(VALUES))
        texts[f"w{i}-bare"] = s.render(VALUES) + "\n"
    got = _run(tmp_path, texts)
    bad = [
        (name, WARNED[int(name[1:].split("-")[0])].source, got[name])
        for name in texts
        if not (got[name][1] and got[name][0] == WARNED[int(name[1:].split("-")[0])].error_class)
    ]
    assert not bad, "\n".join(map(str, bad))
    one = tmp_path / "one.log"
    one.write_text(_warning_line(WARNED[0], WARNED[0].render(VALUES)), encoding="utf-8")
    err = analyze([str(one)], generated_at="fixed").runs[0].record.capture_error
    assert err is not None and err.reason == WARNED_FAILURE

    quiet = {
        f"c{i}": _warning_line(s, s.render(VALUES))
        for i, s in enumerate(CONFIG_WARNINGS)
        if not s.package.startswith("sglang")  # SGLang's prefix prints no level
    }
    assert len(quiet) >= 10
    (tmp_path / "quiet").mkdir()
    got = _run(tmp_path / "quiet", quiet)
    assert not [n for n, (_, gd100, _) in got.items() if gd100], "a config warning is no failure"


def test_generator_reads_warned_failures(tmp_path: Path) -> None:
    """The generator's warning rule (FAILED_CAPTURE): a warning in capture code is capture
    evidence only where its words say the capture failed; lazy %-formatting is a wildcard."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "gen_raise_atlas_w", Path(__file__).resolve().parent.parent / "tools" / "gen_raise_atlas.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen
    spec.loader.exec_module(gen)
    mod = tmp_path / "vllm_omni" / "model_executor" / "models" / "tts" / "graph_wrapper.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(
        "def capture_graphs(sizes):\n"
        "    for size in sizes:\n"
        "        try:\n"
        "            pass\n"
        "        except Exception:\n"
        "            logger.warning('Failed to capture decoder CUDA graph for size=%d', size)\n"
        "    logger.warning('Truncating the decoder graph sizes to %d entries', len(sizes))\n"
        "    logger.warning('decoder warm-up failed (%s); using lazy capture', 'x')\n",
        encoding="utf-8",
    )
    sites, _, _, _ = gen.scan("vllm-omni==0.0.0", tmp_path)
    got = {s.template: s.capture for s in sites}
    assert got == {
        "Failed to capture decoder CUDA graph for size={}": True,
        "Truncating the decoder graph sizes to {} entries": False,
        "decoder warm-up failed ({}); using lazy capture": False,
    }


def test_no_site_pattern_begins_or_ends_with_a_wildcard() -> None:
    """A template that begins with a value ("%s must be an int") once compiled to a search
    starting ".*?": every start of a line tried to its end, quadratic on a long line (a 7 MB
    SGLang log took 29 s per line, its server-args echo holding the word). The ends of a
    search pattern add nothing to whether it is found, so they are trimmed."""
    from diag.engines import atlas

    for site in atlas.sites():
        pattern = site.regex.pattern
        assert not pattern.startswith((".*", r"\s*")), site.source
        assert not pattern.endswith((".*?", r"\s*")), site.source
    site = next(s for s in atlas.sites() if s.parts[0] == "" and len(s.parts) > 2)
    line = "x " * 100_000 + site.render(("v", "w", "y", "z"))
    assert site in atlas.matches(line)
