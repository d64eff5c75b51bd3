"""The typed run record: frozen, its JSON the INTERFACE record (keys and order), and one
ceiling that agrees with how the batches were classified."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import get_args

import numpy as np
import pytest

from diag.api import analyze
from diag.facts.run_record import RECORD_KEYS, BatchCounts, Confidence, PlacedBy
from diag.render.serialize import to_json
from gen import incidents as gen
from tests.conftest import ROOT, SHARED

INCIDENTS = ROOT / "fixtures" / "incidents"
NAMES = sorted(gen.BUILDERS)


def test_record_keys_are_the_interface_table_in_its_order() -> None:
    interface = SHARED / "INTERFACE.md"
    if not interface.is_file():
        pytest.skip(f"INTERFACE.md not present at {interface}")
    text = interface.read_text()
    table = text[text.index("RECORD (every key") : text.index("FINDING:")]
    keys = tuple(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert len(keys) > 10
    assert keys == RECORD_KEYS


@pytest.mark.parametrize("name", NAMES)
def test_the_json_record_is_the_typed_record(name: str) -> None:
    report = analyze([str(INCIDENTS / name)], generated_at="fixed")
    doc = json.loads(to_json(report))
    for run, run_doc in zip(report.runs, doc["runs"], strict=True):
        rec = run.record
        traced = ("trace_verified",) if rec.trace_verified is not None else ()
        assert tuple(run_doc["record"]) == RECORD_KEYS + traced  # every key, in order
        if rec.trace_verified is not None:  # (set where profiler traces joined the run)
            assert run_doc["record"]["trace_verified"] == rec.trace_verified.to_json()
        assert run_doc["record"]["batches"] == dataclasses.asdict(rec.batches)
        assert run_doc["record"]["graph_mode"] == rec.graph_mode
        if rec.capture_error is not None:
            err = run_doc["record"]["capture_error"]
            assert err["class"] == rec.capture_error.error_class
            # how sure, and the evidence that decided it (issue 32, point 2)
            assert err["confidence"] in get_args(Confidence)
            assert err["placed_by"] in set(get_args(PlacedBy)) - {"none"}
            assert err["evidence"] == rec.capture_error.evidence != ""
            assert ("conflict" in err) == (rec.capture_error.conflict is not None)
        if rec.decode_batch_shape is not None:
            hist = run_doc["record"]["decode_batch_shape"]["histogram"]
            assert [(int(s), n) for s, n in hist.items()] == list(rec.decode_batch_shape.histogram)
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.graph_mode = "disabled"  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.batches.graph = 0  # type: ignore[misc]


@pytest.mark.parametrize("name", NAMES)
def test_the_one_ceiling_is_the_one_batches_were_classified_against(name: str) -> None:
    """Above the ceiling means above RunFacts.ceiling: no batch served by a graph is larger,
    every batch the classifier put above it is."""
    report = analyze([str(INCIDENTS / name)], generated_at="fixed")
    for run in report.runs:
        facts, b = run.facts, run.facts.batches
        if facts.ceiling is None or b.empty:
            continue
        size = b["batch_size"].to_numpy(dtype=float, na_value=np.nan)
        inferred_graph = (b["verdict"] == "graph").to_numpy() & ~b["logged"].to_numpy(dtype=bool)
        above = (b["reason"] == "above_ceiling").to_numpy()
        assert not (size[inferred_graph] > facts.ceiling).any()
        assert (size[above] > facts.ceiling).all()


def test_counts_are_a_value_not_a_mapping() -> None:
    counts = BatchCounts(graph=3, eager=1, source="logged")
    assert counts.decided == 4 and counts.to_json() == {
        "graph": 3,
        "eager": 1,
        "unknown": 0,
        "source": "logged",
    }
    with pytest.raises(TypeError):
        counts["graph"]  # type: ignore[index]
