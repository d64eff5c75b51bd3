"""Which inputs are searched for a late ``"traceEvents"`` key: JSON documents, not logs whose
first line opens with a bracket (SGLang's ``[2025-06-10 08:00:00] ...``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import diag.ingest.inputs as inputs_mod
from diag.ingest import ingest
from diag.ingest.inputs import _json_start


@pytest.mark.parametrize(
    "head",
    [b'{"traceEvents": [', b'\xef\xbb\xbf {"a": 1}', b'[{"ph": "X", "na', b"[]", b"[1.5e", b'["ab'],
)
def test_json_heads_may_be_traces(head: bytes) -> None:
    assert _json_start(head)


@pytest.mark.parametrize(
    "head",
    [b"[2025-06-10 08:00:00] server_args=", b"[08:00:00 TP0] Decode batch", b"[INFO] x", b"{x"],
)
def test_bracket_logs_are_not_json(head: bytes) -> None:
    assert not _json_start(head)


def test_a_late_trace_key_is_still_found(tmp_path: Path) -> None:
    meta = {"schemaVersion": 1, "deviceProperties": [{"name": "x" * 50}] * 40}
    doc = json.dumps(meta)[:-1] + ', "traceEvents": []}'
    assert doc.index('"traceEvents"') > 1024  # past the first KB
    path = tmp_path / "profile.json"
    path.write_text(doc)
    ing = ingest([str(path)])
    assert [s.path for s in ing.inputs if s.kind == "trace"] == [str(path)]


def test_sglang_log_is_not_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        "[2025-06-10 08:00:00 TP0] Load weight begin. avail mem=78.52 GB\n"
        "[2025-06-10 08:00:01 TP0] note: traceEvents\n"
    )

    def searched(*_: object) -> bool:
        raise AssertionError("a log was searched for traceEvents")

    monkeypatch.setattr(inputs_mod, "holds_trace_events", searched)
    ing = ingest([str(path)])
    assert [s.kind for s in ing.inputs] == ["log"]
