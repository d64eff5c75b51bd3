"""The JSON report per run grows with what the log shows, not with fixed tables: a run's bucket
frontier keeps the rows its decision weighs (the recommended set and its neighbours in the frontier; the
``recommend`` command keeps every row), scalar lists sit on one line, and nothing else of the
report changes."""

from __future__ import annotations

import json
from pathlib import Path

from diag.api import analyze
from diag.render.serialize import frontier_summary, to_json

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = ROOT / "fixtures" / "incidents"
NAMES = ("sglang-oversized-window", "sglang-healthy", "sglang-graph-downgraded")


def test_json_is_the_report_with_the_frontier_cut_to_its_decision() -> None:
    report = analyze([str(INCIDENTS / n) for n in NAMES], generated_at="test")
    text = to_json(report)
    doc, full = json.loads(text), report.to_dict()
    cut = 0
    for run, whole in zip(doc["runs"], full["runs"], strict=True):
        rec, rec_full = run.get("recommendation"), whole.get("recommendation")
        if rec_full is None or "frontier" not in rec_full:
            assert run == whole
            continue
        rows, all_rows = rec.pop("frontier"), rec_full.pop("frontier")
        assert rec.pop("frontier_rows") == len(all_rows)
        assert run == whole  # the rest of the run is unchanged
        assert all(r in all_rows for r in rows) and len(rows) <= 3
        picked = [r for r in all_rows if r["recommended"]]
        assert all(p in rows for p in picked)
        at = [all_rows.index(r) for r in rows]  # neighbours in the frontier's own order (by K)
        assert at == list(range(at[0], at[0] + len(at)))
        cut += len(all_rows) - len(rows)
    assert cut > 0, "no run had a frontier to cut"
    # a capture size list is one line of the file, not one line per size
    sizes = doc["runs"][0]["record"]["graph_capture_sizes"]
    assert len(sizes) > 16 and json.dumps(sizes) in text


def test_frontier_summary_without_a_recommended_row_keeps_the_cheapest() -> None:
    rows = [{"k": k, "total_s_h": c, "recommended": False} for k, c in [(2, 9), (3, 4), (4, 1)]]
    assert [r["k"] for r in frontier_summary(rows)] == [3, 4]
    rows[0]["recommended"] = True
    assert [r["k"] for r in frontier_summary(rows)] == [2, 3]
    assert frontier_summary([]) == []


def test_runs_written_in_turn_give_the_whole_document_layout() -> None:
    """``to_json`` makes each run's part in turn: the text is the whole document's encoding,
    byte for byte (the layout of ``_encode`` on the document built at once)."""
    from diag.render.fleet import fleet_json
    from diag.render.serialize import _encode

    report = analyze([str(INCIDENTS / n) for n in NAMES], generated_at="test")
    assert len(report.runs) >= 3
    doc = report.to_dict()
    for run in doc["runs"]:
        rec = run.get("recommendation")
        if isinstance(rec, dict) and isinstance(rec.get("frontier"), list):
            rec["frontier_rows"] = len(rec["frontier"])
            rec["frontier"] = frontier_summary(rec["frontier"])
    assert report.fleet is not None
    doc["fleet"] = fleet_json(report.fleet)
    assert to_json(report) == "".join(_encode(doc, "")) + "\n"
    assert report.to_dict(runs=False)["runs"] == []


def test_scalars_are_written_as_json_dumps_writes_them() -> None:
    """The JSON writer's scalar fast path (str, int, finite float, None, bool) against
    ``json.dumps``, the escapes and the values json spells its own way included."""
    import enum
    import math

    from diag.render.serialize import _key, _scalar

    class Level(enum.IntEnum):
        LOW = 1

    values = [
        "",
        "plain",
        'quote " and \\ back',
        "tab\tnew\nline",
        "\x00\x1f ctrl",
        "é ü 漢字 🙂",
        0,
        -1,
        2**70,
        1.0,
        -0.0,
        1e-300,
        1.5e300,
        0.1 + 0.2,
        math.nan,
        math.inf,
        -math.inf,
        None,
        True,
        False,
        Level.LOW,
        [1, "a", None],
        (2.5, True),
    ]
    for v in values:
        assert _scalar(v) == json.dumps(v, ensure_ascii=False), v
    for k in ["k", "é\n", 3, 2.5, True, None]:
        assert "{" + _key(k) + ": 0}" == json.dumps({k: 0}, ensure_ascii=False), k
