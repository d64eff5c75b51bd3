"""Metamorphic invariance over every real excerpt (issue 21, point 6).

Every excerpt of ``../shared/corpus/real``, ``real-2`` and ``real-3``, and a fixed half of the
project's mined set (``tests/corpus/mined``, every second file by name, to bound the run
time), goes through every transformation family of :mod:`tests.metamorphic` with parameters hypothesis draws; the
verdict must stay as it was, or change only as :func:`tests.metamorphic.expected` computes
from what the transformation dropped. ``-s`` prints the invariance table (per transformation:
pairs tried, verdicts kept) and every pair that changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import CORPUS
from tests.corpus_scoring import MINED
from tests.metamorphic import (
    Transform,
    Verdict,
    expected,
    read_lines,
    sweep_settings,
    transforms,
    verdict_of,
    write_lines,
)

SETS = ("real", "real-2", "real-3")
TARGET = 0.99
SLICES = 8
#: the mined set (in the repository, never skipped): every MINED_EVERY-th file by name.
MINED_EVERY = 2


def _files(corpus: Path) -> list[Path]:
    cases = yaml.safe_load((corpus / "labels.yaml").read_text())["cases"]
    return [corpus / c["file"] for c in cases]


def _groups() -> list[list[Path]]:
    """The shared sets that are present (this checkout may lack them) as one group, the mined
    sample as another: each group is one hypothesis sweep, so neither draws more parameters
    than one example holds (and the shared sets get the draws they got before)."""
    shared = [p for name in SETS if (CORPUS / name).is_dir() for p in _files(CORPUS / name)]
    return [g for g in (shared, sorted(_files(MINED))[::MINED_EVERY]) if g]


@cache
def _before(path: Path) -> Verdict:
    return verdict_of(path)


@cache
def _length(path: Path) -> int:
    return len(read_lines(path))


@dataclass
class Tally:
    """Per transformation: pairs tried, verdicts kept, and how many of them held a capture
    error that had to stay (its class, or ``other`` when the cut forces it) and a negative
    that had to stay quiet; plus what changed."""

    table: dict[str, list[int]] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    loud_negatives: list[str] = field(default_factory=list)


def _sweep(t: Transform, excerpts: list[Path], work: Path, tally: Tally) -> None:
    """Every excerpt through ``t``, parameters drawn by hypothesis.

    Hypothesis begins with its simplest example (every draw minimal): the excerpts are dealt
    round-robin over SLICES examples, so all but one slice get freely drawn parameters; every
    example draws every excerpt's parameters (hypothesis wants the same draws each time)."""
    row = tally.table.setdefault(t.name, [0, 0, 0, 0])
    dealt = [0]
    slices = SLICES if t.drawn else 1

    @sweep_settings(slices)
    @given(data=st.data())
    def sweep(data: st.DataObject) -> None:
        slice_, dealt[0] = dealt[0], dealt[0] + 1
        drawn = [(p, data.draw(t.params(_length(p)), label=p.name)) for p in excerpts]
        for path, params in drawn[slice_::slices]:
            before = _before(path)
            lines = read_lines(path)
            out, kept = t.apply(lines, params)
            target = work / path.name
            write_lines(target, out, t.crlf)
            after = verdict_of(target).values
            want = expected(before, lines, kept)
            diff = {k: (v, after.get(k)) for k, v in want.items() if after.get(k) != v}
            row[0] += 1
            row[2] += "capture_error" in want and want["capture_error"] is not None
            row[3] += "capture_error" in want and want["capture_error"] is None
            what = getattr(params[0] if isinstance(params, tuple) else params, "family", params)
            if not diff:
                row[1] += 1
            else:
                tally.changed.append(f"{t.name} [{what}] {path.parent.name}/{path.name}: {diff}")
            if before.values.get("capture_error") is None and after.get("capture_error"):
                tally.loud_negatives.append(f"{t.name} [{what}] {path.name}: {after}")

    sweep()
    assert dealt[0] == slices, f"{t.name}: hypothesis ran fewer examples than slices"


@pytest.mark.slow
def test_verdicts_survive_what_pastes_do_to_logs(tmp_path: Path) -> None:
    """>= 99 % of (excerpt, transformation) pairs keep their verdict (or change only as what
    was dropped forces), and no negative turns into a capture failure."""
    tally = Tally()
    for t in transforms():
        for excerpts in _groups():
            _sweep(t, excerpts, tmp_path, tally)
    tried = sum(r[0] for r in tally.table.values())
    kept = sum(r[1] for r in tally.table.values())
    print("\ninvariance per transformation:")
    print(
        f"  {'transformation':36s} {'pairs':>5s} {'kept':>5s} {'share':>7s} {'errors':>6s} {'quiet':>5s}"
    )
    for name, (n, k, e, q) in tally.table.items():
        print(f"  {name:36s} {n:5d} {k:5d} {k / max(n, 1):7.1%} {e:6d} {q:5d}")
    e_all = sum(r[2] for r in tally.table.values())
    q_all = sum(r[3] for r in tally.table.values())
    print(f"  {'all':36s} {tried:5d} {kept:5d} {kept / max(tried, 1):7.1%} {e_all:6d} {q_all:5d}")
    print("  (errors: pairs whose capture error had to stay; quiet: negatives that had to stay so)")
    for line in tally.changed:
        print("CHANGED", line)
    assert not tally.loud_negatives, tally.loud_negatives
    assert kept / tried >= TARGET, f"{kept}/{tried} verdicts kept"
