"""CPU time and RSS of each analysis step after ingest, on one log, in this process.

The log is ingested once (``jobs=1``), then the steps of ``diag.api.analyze`` run one by
one, each printed with its CPU seconds and the RSS over the ingested tables (after the
step, and the peak so far):

  split_runs   event tables -> runs
  build_facts  facts per run (batch classification, requests, record)
  advise_runs  frontier and recommended set per server
  rules        the rule pack on every run
  evidence     the cited log lines read back
  recommend    recommendations attached
  json         the JSON report text

Usage: python bench/analysis_stages.py FILE
"""

from __future__ import annotations

import gc
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.advise.recommend import attach_recommendations  # noqa: E402
from diag.advise.run_advice import advise_runs  # noqa: E402
from diag.evidence import resolve_evidence  # noqa: E402
from diag.facts.joins import run_profiles  # noqa: E402
from diag.facts.runs import split_runs  # noqa: E402
from diag.ingest import ingest  # noqa: E402
from diag.pipeline import facts_stage  # noqa: E402
from diag.render.serialize import to_json  # noqa: E402
from diag.report import Report, RunReport  # noqa: E402
from diag.rules.engine import RuleEngine  # noqa: E402


def _rss_mb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0)
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/analysis_stages.py FILE (--help: what it prints)")
    path = sys.argv[1]
    start = _cpu()
    ing = ingest([path], jobs=1)
    gc.collect()
    base = _rss_mb()
    print(f"ingest       cpu {_cpu() - start:6.2f} s   rss {base} MB (the base below)")
    first = last = _cpu()

    def step(name: str) -> None:
        nonlocal last
        now = _cpu()
        print(
            f"  {name:<11} cpu {now - last:6.2f} s   rss +{_rss_mb() - base} MB   peak {_peak_mb()} MB"
        )
        last = now

    runs = split_runs(ing.tables, ing.streams)
    step("split_runs")
    facts = facts_stage(runs, ing, None)
    step("build_facts")
    engine = RuleEngine.load(None)
    advice = advise_runs(facts, ing.snapshots)
    step("advise_runs")
    reports = [
        RunReport(
            f,
            engine.evaluate(f, ing.snapshots, advice.get(f.run.id)),
            advice=advice.get(f.run.id),
        )
        for f in facts
    ]
    step("rules")
    resolve_evidence(reports)
    step("evidence")
    attach_recommendations(reports, ing.snapshots)
    step("recommend")
    report = Report(
        ing.inputs, reports, run_profiles(facts) + ing.profiles, ing.snapshots, ing.tables, "-"
    )
    to_json(report)
    step("json")
    print(
        f"analysis     cpu {_cpu() - first:6.2f} s   rss +{_rss_mb() - base} MB over the "
        f"ingested tables, peak {_peak_mb()} MB (+{_peak_mb() - base} MB)"
    )


if __name__ == "__main__":
    main()
