"""A squeeze signal no rule can attribute is said as a run note, never dropped."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from diag.rules.engine import RuleEngine

# SGLang before the "cuda graph:" field (Jan 2025): decode lines at full KV usage, then the
# scheduler retracting requests (shared/formats: SGLang decode D4 and "Decode out of memory")
LOG = "".join(
    [
        f"[2025-01-06 02:58:{s:02d} TP0] Decode batch. #running-req: 2, #token: 307481, "
        "token usage: 1.00, gen throughput (token/s): 10.92, #queue-req: 0\n"
        for s in (11, 19, 26)
    ]
    + [
        f"[2025-01-06 02:58:44 TP{r}] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.0980 -> 0.9446\n"
        for r in (0, 1)
    ]
)


def test_saturation_without_graph_facts_is_a_note(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(LOG, encoding="utf-8")
    report = analyze([str(path)], generated_at="x")
    run = report.runs[0]
    assert [f.code for f in run.findings if f.code == "GD120"] == []
    notes = [n for n in run.notes if "KV pool saturated" in n]
    assert notes == [
        "KV pool saturated (2 retractions, 0 preemptions); not reported as GD120 kv-squeeze: "
        "the log does not say whether CUDA graphs are on"
    ]
    assert report.to_dict()["runs"][0]["notes"] == run.notes
    # the rules judge again on the same facts (recommend, compare): the facts are frozen,
    # the same note comes back, and the run's notes still hold it once
    again = RuleEngine.load().judge(run.facts, report.snapshots, run.advice)[1]
    assert [n for n in again if "KV pool saturated" in n] == notes
    assert len([n for n in run.notes if "KV pool saturated" in n]) == 1
