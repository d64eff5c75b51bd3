"""Every 2026 line graphdiag reads, rendered from the engine's own format call and read back.

``tests/data/engine_formats_2026.yaml`` holds each format call's template string as the
released wheel spells it (cited ``package==version:path:line``), with sample values. The
rendered line goes through the real scanner of its engine (the per-line path; the declared
periodic lines' RE2 and C forms are held equal to it by tests/test_periodic_spec.py) and must
give the values it was rendered with: a declaration that drifts from the engine's template
fails here. With ``GRAPHDIAG_WHEELS`` set to a folder of unzipped wheels
(``<folder>/<package>-<version>/...``), the stored templates are checked against the files.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.events import EventSink, EventTables
from diag.lines import periodic
from diag.parsers.scan import StreamScanner
from diag.parsers.sglang import SGLangParser
from diag.parsers.traceback import ErrorParser
from diag.parsers.vllm import VLLMParser

DATA = Path(__file__).parent / "data" / "engine_formats_2026.yaml"
FORMATS: list[dict[str, Any]] = yaml.safe_load(DATA.read_text())
HEADERS = {
    "sglang": "[2026-08-01 10:00:00 TP0] ",
    "vllm": "(EngineCore pid=7) INFO 08-01 10:00:00 [loggers.py:199] ",
}
_FIELD = re.compile(r"\{((?:\([^)]*\))|[^{}:]+)(?::([^{}]+))?\}")


def render(fmt: dict[str, Any]) -> str:
    """The line the engine prints for the sample values (Python's own formatting)."""
    if fmt["style"] == "percent":
        return fmt["template"] % tuple(fmt["args"])
    values = fmt["values"]

    def one(m: re.Match[str]) -> str:
        value = values[m.group(1)]
        return format(value, m.group(2) or "") if m.group(2) else str(value)

    return _FIELD.sub(one, fmt["template"])


def scan(engine: str, line: str) -> EventTables:
    sink = EventSink()
    parser = SGLangParser() if engine == "sglang" else VLLMParser()
    scanner = StreamScanner([parser, ErrorParser()], sink, engine)
    scanner.scan("t.log", [(HEADERS[engine] + line + "\n").encode()])
    scanner.close()
    return sink.to_tables()


def _same(want: Any, have: Any) -> bool:
    if isinstance(have, str) and isinstance(want, list):
        have = json.loads(have)
    if isinstance(want, float) or isinstance(have, float):
        return have is not None and math.isclose(float(want), float(have), abs_tol=0.051)
    return bool(want == have)


@pytest.mark.parametrize("fmt", FORMATS, ids=[f["id"] for f in FORMATS])
def test_the_rendered_template_is_read_with_its_values(fmt: dict[str, Any]) -> None:
    engine = fmt["id"].split(".", 1)[0]
    line = render(fmt)
    tables = scan(engine, line)
    for kind, want in fmt["expect"].items():
        frame = tables[kind]
        assert not frame.empty, f"{fmt['id']}: no {kind} event from {line!r}"
        if kind == "sizing":
            got = dict(zip(frame["name"], frame["value"], strict=True))
            for name, value in want.items():
                assert _same(value, got.get(name)), (fmt["id"], name, got)
            continue
        row = frame.iloc[-1].to_dict()
        for key, value in want.items():
            assert _same(value, row.get(key)), (fmt["id"], key, value, row.get(key), line)


@pytest.mark.parametrize(
    "fmt", [f for f in FORMATS if "iteration" in f["expect"]], ids=lambda f: f["id"]
)
def test_the_declaration_reads_the_template_alone(fmt: dict[str, Any]) -> None:
    """The declared periodic line (what every bulk path derives from) reads the template."""
    m = re.compile(periodic.VL_ITERATION.regex("python"), re.ASCII).match(render(fmt))
    assert m is not None, render(fmt)
    got = periodic.VL_ITERATION.read(m)
    for key, value in fmt["expect"]["iteration"].items():
        assert _same(value, got[key]), (key, value, got[key])


def test_a_reworded_template_is_refused() -> None:
    """The check can fail: the engine rewording a fixed part leaves the line unread."""
    fmt = next(f for f in FORMATS if f["id"] == "vllm.iteration_logger")
    moved = {**fmt, "template": fmt["template"].replace("generation tokens", "decode tokens")}
    assert scan("vllm", render(moved))["iteration"].empty


WHEELS = os.environ.get("GRAPHDIAG_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="GRAPHDIAG_WHEELS (unzipped wheels) not set")
@pytest.mark.parametrize("fmt", FORMATS, ids=[f["id"] for f in FORMATS])
def test_the_stored_template_is_the_wheels(fmt: dict[str, Any]) -> None:
    pkg, rest = fmt["cite"].split("==", 1)
    version, path, lines = rest.split(":", 2)
    text = (Path(str(WHEELS)) / f"{pkg}-{version}" / path).read_text()
    first, _, last = lines.partition("-")
    src = text.splitlines()[int(first) - 1 : int(last or first)]
    pieces = re.findall(r'f?"((?:[^"\\]|\\.)*)"', "\n".join(src))
    joined = "".join(pieces)
    words = [w for w in re.split(r"\{[^{}]*\}|%[-0-9.]*[sdf%]", fmt["template"]) if w.strip()]
    for word in words:
        assert word.strip() in joined, (fmt["id"], word)
