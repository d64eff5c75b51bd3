"""The SGLang batch-line shapes of the PD, mamba-hybrid and forward-iteration eras, each read
by the three matchers derived from its declaration (per-line regex, RE2, C) alike, as the
parser's own field searches read it (an oracle independent of the declaration), and the same
on the bulk and per-line paths of a whole log, plain and behind collector prefixes.

The lines are written by hand from sglang's f-strings (cited per line) and the formats
reference (``shared/formats/sglang-log-formats.md`` P6-P13, D14-D15)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diag.events import EventSink
from diag.ingest import parsers_for
from diag.lines import periodic
from diag.normalize.prefix import peel
from diag.parsers import sglang
from diag.parsers.base import Context
from tests.conftest import ROOT
from tests.test_hotpath_oracle import assert_same_tables, both
from tests.test_periodic_spec import _comparable, _three

sys.path.insert(0, str(ROOT / "bench"))
import acceptance  # noqa: E402

HEADER = "[2026-01-01 00:00:{s:02d} TP0] "
SHAPES: dict[str, list[str]] = {
    "sglang.prefill": [
        # PD prefill P7-P9, no running count (sglang==0.5.2:srt/managers/
        # scheduler_metrics_mixin.py:114-125)
        "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
        "#unbootstrapped-req: 0, #queue-req: 3, #transferring-req: 2, "
        "input throughput (token/s): 12.50, ",
        # P6 PD: the bootstrap queue between running and queue, no throughput (formats P6)
        "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #unbootstrapped-req: 2, #queue-req: 0, #transferring-req: 1 ",
        # P10-P11 PD with SGLANG_LOG_FORWARD_ITERS (sglang==0.5.5:srt/managers/
        # scheduler_metrics_mixin.py:135-149)
        "Prefill batch [12], #new-seq: 10, #new-token: 4096, #cached-token: 10, "
        "token usage: 0.00, #running-req: 4, #queue-req: 186, #prealloc-req: 1, "
        "#inflight-req: 2, input throughput (token/s): 3.00, ",
        # mamba hybrid (sglang==0.5.5:srt/managers/scheduler_metrics_mixin.py:127-130), P13
        "Prefill batch, #new-seq: 12, #new-token: 43008, #cached-token: 0, "
        "full token usage: 0.14, mamba usage: 0.20, #running-req: 1, #queue-req: 97, "
        "#pending-token: 109585, npu graph: False, input throughput (token/s): 15734.14",
        # P12: the throughput before the graph flag
        "Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, "
        "full token usage: 0.01, swa token usage: 0.02, #running-req: 0, #queue-req: 0, "
        "input throughput (token/s): 45.65, cuda graph: False",
    ],
    "sglang.decode": [
        # mamba hybrid with SGLANG_LOG_FORWARD_ITERS (sglang==0.5.5:srt/managers/
        # scheduler_metrics_mixin.py:249-266, 295-299)
        "Decode batch [33], #running-req: 3, #full token: 100, full token usage: 0.10, "
        "mamba num: 3, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 12.00, "
        "#queue-req: 0, ",
        # PD decode queues (sglang==0.5.5:srt/managers/scheduler_metrics_mixin.py:289-293)
        "Decode batch, #running-req: 3, #token: 100, token usage: 0.10, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, "
        "cuda graph: True, gen throughput (token/s): 12.00, #queue-req: 0, ",
        "Decode batch, #running-req: 8, #token: 9, token usage: 0.01, accept len: 2.10, "
        "accept rate: 0.70, pre-allocated usage: 0.00, #prealloc-req: 2, #transfer-req: 0, "
        "#retracted-req: 0, cpu graph: False, gen throughput (token/s): 1.50, #queue-req: 4,",
    ],
}
CASES = [(name, i) for name, lines in SHAPES.items() for i in range(len(lines))]


def _line(name: str, i: int) -> bytes:
    return (HEADER.format(s=i) + SHAPES[name][i]).encode()


@pytest.mark.parametrize(("name", "i"), CASES)
def test_the_three_matchers_read_the_shape(name: str, i: int) -> None:
    per_line, re2, c = _three(periodic.LINES[name], [_line(name, i)])
    assert per_line[0], "the declaration does not describe the line"
    assert _comparable(re2) == _comparable(per_line)
    if c is not None:
        assert _comparable(c) == _comparable(per_line)


def _event(text: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    sink = EventSink()
    with monkeypatch.context() as m:
        if not fast:  # the field searches only
            m.setattr(sglang, "_FAST_DECODE", sglang.re.compile(r"(?!)"))
            m.setattr(sglang, "_FAST_PREFILL", sglang.re.compile(r"(?!)"))
        sglang.SGLangParser().feed(peel("x", 1, text), Context(sink, "sglang"))
    frame = sink.to_tables()["decode_batch" if "Decode" in text else "prefill_batch"]
    assert len(frame) == 1, text
    return {k: v for k, v in frame.iloc[0].to_dict().items() if v == v}  # NaN: missing


@pytest.mark.parametrize(("name", "i"), CASES)
def test_the_declaration_reads_as_the_field_searches(
    name: str, i: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _line(name, i).decode()
    assert _event(text, True, monkeypatch) == _event(text, False, monkeypatch)


@pytest.mark.parametrize(
    "prefix", ["", "2025-03-01T00:00:00.123Z ", "svc-1  | ", "> ", "(pid=12, ip=10.0.0.1) "]
)
@pytest.mark.parametrize("crlf", [False, True])
def test_bulk_and_per_line_read_the_shapes_alike(tmp_path: Path, prefix: str, crlf: bool) -> None:
    end = b"\r\n" if crlf else b"\n"
    body = b"".join(prefix.encode() + _line(n, i) + end for n, i in CASES * 3)
    path = tmp_path / "x.log"
    path.write_bytes(body)
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, f"{prefix!r} crlf={crlf}")
    figures = acceptance.measure([path])  # every row read in bulk
    for name in SHAPES:
        c = figures[name]
        assert c["rows"] == c["bulk"] == 3 * len(SHAPES[name]), (name, dict(c))


@pytest.mark.parametrize(
    "prefix",
    # another parser's trigger in the prefix: CmdlineParser's "sglang", a capture word
    ["[pod/sglang-router-0/main] ", "Capture-1  | ", "@/tmp/sglang-run.txt "],
)
def test_a_trigger_in_the_prefix_keeps_the_line_per_line(tmp_path: Path, prefix: str) -> None:
    anchors = {a for p in parsers_for("sglang") for a in p.anchors}
    assert any(a in prefix for a in anchors), prefix
    body = b"".join(prefix.encode() + _line(n, i) + b"\n" for n, i in CASES)
    path = tmp_path / "x.log"
    path.write_bytes(body)
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, prefix)
    figures = acceptance.measure([path])
    for name in SHAPES:
        assert figures[name]["rows"] == len(SHAPES[name])
        assert figures[name]["bulk"] == 0, (prefix, name)
