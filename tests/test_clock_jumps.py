"""Clock jumps (issue 36 item 6): step lines whose clock goes back 6 h mid-log (a host clock
reset) or a day forward are a note on the run, and the rates advice prices with read only the
stretches around the jump, so the costs and the recommendation are those of the log without
it (before: the 6 h reset spread the steps over 6 h, the current set's cost fell 130-fold)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.cli import main
from diag.facts.steps import CLOCK_BACK_S, CLOCK_FORWARD_S, clock_elapsed, clock_jumps
from tests.bad_inputs_support import INCIDENTS

LOG = INCIDENTS / "sglang-padding-waste" / "server.log"
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _shifted(hours: float) -> str:
    lines = LOG.read_text().splitlines()
    mid = len(lines) // 2
    out = []
    for i, ln in enumerate(lines):
        m = STAMP.match(ln)
        if i >= mid and m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") + timedelta(hours=hours)
            ln = "[" + t.strftime("%Y-%m-%d %H:%M:%S") + ln[m.end() :]
        out.append(ln)
    return "\n".join(out) + "\n"


def _run(path: Path, out: Path) -> dict:
    res = CliRunner().invoke(
        main, ["analyze", str(path), "-o", str(out), "--no-html", "--format", "json", "-q"]
    )
    assert res.exit_code in (0, 1), res.output
    (run,) = json.loads(res.stdout)["runs"]
    return run


@pytest.mark.parametrize("hours", [-6.0, 30.0])
def test_a_clock_jump_is_noted_and_does_not_change_the_advice(tmp_path: Path, hours: float) -> None:
    base = _run(LOG, tmp_path / "a")
    path = tmp_path / "server.log"
    path.write_text(_shifted(hours))
    jumped = _run(path, tmp_path / "b")
    way = "back" if hours < 0 else "forward"
    (note,) = [n for n in jumped["notes"] if n.startswith("clock jump")]
    assert f"go {way} {abs(hours):.1f} h at line" in note and str(path) in note
    assert not any(n.startswith("clock jump") for n in base["notes"])
    r0, r1 = base["recommendation"], jumped["recommendation"]
    assert r1["decision"]["kind"] == r0["decision"]["kind"]
    c0, c1 = r0["current"]["cost_s_h"], r1["current"]["cost_s_h"]
    assert abs(c1 - c0) <= 0.05 * c0, (c0, c1)


def test_elapsed_time_counts_only_the_stretches_between_jumps() -> None:
    ts = np.array([100.0, 110.0, np.nan, 120.0, 120 - 6 * 3600, 120 - 6 * 3600 + 30])
    elapsed, jumps = clock_elapsed(ts)
    assert elapsed.tolist() == [0.0, 10.0, 0.0, 20.0, 20.0, 50.0] and jumps.tolist() == [4]
    # without a jump: ts - min(ts), neighbours swapped by racing writers included
    swapped = np.array([0.0, 10.0, 5.0, 20.0])
    assert clock_elapsed(swapped)[0].tolist() == swapped.tolist()
    assert len(clock_elapsed(swapped)[1]) == 0


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.floats(-5.0, 60.0),  # ordinary steps, neighbours swapped included
            st.sampled_from([-CLOCK_BACK_S - 1.0, CLOCK_FORWARD_S + 1.0, -6 * 3600.0]),
            st.just(float("nan")),  # a line without a stamp
        ),
        max_size=60,
    )
)
def test_the_jumps_alone_are_those_of_the_elapsed_times(steps: list[float]) -> None:
    """``clock_jumps`` (the note's: no elapsed times made) lands where ``clock_elapsed``
    says, stamps missing or not."""
    ts = np.array(steps, dtype=float)
    stamped = ~np.isnan(ts)
    ts[stamped] = 1.7e9 + np.cumsum(ts[stamped])
    assert clock_jumps(ts).tolist() == clock_elapsed(ts)[1].tolist()


def _elapsed_whole(ts: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The elapsed times and jumps by their definition in one piece (each row's stretch
    offset, every difference at once)."""
    t = np.asarray(ts, dtype=float)
    ok = np.isfinite(t)
    out = np.zeros(len(t))
    if not ok.any():
        return out, []
    idx = np.flatnonzero(ok)
    v = t[idx]
    d = np.diff(v)
    jump = (d < -CLOCK_BACK_S) | (d > CLOCK_FORWARD_S)
    starts = np.concatenate(([0], np.flatnonzero(jump) + 1))
    lo = np.minimum.reduceat(v, starts)
    hi = np.maximum.reduceat(v, starts)
    offset = np.concatenate(([0.0], np.cumsum(hi - lo)[:-1]))
    seg = np.cumsum(np.concatenate(([False], jump)))
    out[idx] = v - lo[seg] + offset[seg]
    return out, idx[starts[1:]].tolist()


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.floats(-5.0, 60.0),
            st.sampled_from([-CLOCK_BACK_S - 1.0, CLOCK_FORWARD_S + 1.0, -6 * 3600.0]),
            st.just(float("nan")),
        ),
        max_size=60,
    ),
    rows=st.integers(1, 8),
)
def test_elapsed_times_made_a_few_rows_at_a_time_are_those_in_one_piece(
    steps: list[float], rows: int
) -> None:
    """(issue 37: a million steps' elapsed times without row-long temporaries)"""
    import diag.facts.steps as steps_module

    ts = np.array(steps, dtype=float)
    stamped = ~np.isnan(ts)
    ts[stamped] = 1.7e9 + np.cumsum(ts[stamped])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(steps_module, "_ROWS", rows)
        got, jumps = clock_elapsed(ts)
        alone = clock_jumps(ts)
    want, want_jumps = _elapsed_whole(ts)
    assert got.tobytes() == want.tobytes()
    assert jumps.tolist() == alone.tolist() == want_jumps
