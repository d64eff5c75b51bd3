"""How capture evidence combines (diag.facts.attribution), on logs written for each rule;
the fixtures of fixtures/errors/attribution-*.log cover each kind of evidence end to end."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from diag.facts.attribution import Evidence, decide

BAR = "Capturing CUDA graphs (decode, FULL):   9%|▊         | 3/35 [00:00<00:09,  3.30it/s]"


def _ev(kind: str, for_: bool, strength: str, key: int = -1) -> Evidence:
    return Evidence(kind, for_, strength, f"{kind} {'for' if for_ else 'against'}", None, key)  # type: ignore[arg-type]


def test_the_strongest_proof_decides_and_the_other_side_is_kept() -> None:
    advice = _ev("advice_block", True, "proof")
    frames_against = _ev("frames", False, "proof")
    got = decide([frames_against, advice], named=False)
    assert (got.confidence, got.placed_by) == ("certain", "advice_block")
    assert got.conflict == (frames_against,)
    words = _ev("message", True, "proof")
    got = decide([words, frames_against], named=True)
    assert (got.confidence, got.placed_by) == ("no", "frames")
    assert "overruled" in (got.conflict_note() or "") and "message for" in got.conflict_note()


def test_positional_signs_the_most_recent_wins_words_against_make_it_likely() -> None:
    old_for = _ev("process_phase", True, "strong", key=3)
    new_against = _ev("process_phase", False, "strong", key=9)
    assert decide([old_for, new_against], named=True).confidence == "no"
    assert decide([_ev("capture_bar", True, "strong", 12), new_against], named=True).confidence == (
        "certain"
    )
    words_against = _ev("message", False, "strong")
    got = decide([old_for, words_against], named=True)
    assert (got.confidence, got.conflict) == ("likely", (words_against,))
    # a strong sign for an error whose class names nothing, or only weak signs: likely
    assert decide([old_for], named=False).confidence == "likely"
    assert decide([_ev("neighbours", True, "weak", 4)], named=True).confidence == "likely"
    # strong against beats weak for
    assert decide([_ev("neighbours", True, "weak", 12), new_against], named=True).confidence == "no"
    assert decide([], named=True).confidence == "no"


def _run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines) + "\n")
    return analyze([str(path)], generated_at="x").runs[0]


ERROR = (
    "CUDA error (/workspace/csrc/custom_all_reduce.cuh:368): no kernel image is available for "
    "execution on the device"
)


def test_a_neighbours_capture_line_long_before_the_error_is_not_just_before_it(
    tmp_path: Path,
) -> None:
    """By time: both lines stamped (docker --timestamps), a capture line 20 minutes before
    an error that names no process says nothing about it."""
    begin = (
        "2025-08-02T11:20:03.000Z [2025-08-02 11:20:03 TP0] Capture cuda graph begin. "
        "This can take up to several minutes. avail mem=4.10 GB"
    )
    near = _run(tmp_path, [begin, "2025-08-02T11:20:09.000Z " + ERROR])
    err = near.record.to_json()["capture_error"]
    assert (err["placed_by"], err["confidence"]) == ("neighbours", "likely")
    far = _run(tmp_path, [begin, "2025-08-02T11:40:09.000Z " + ERROR])
    assert far.record.to_json()["capture_error"] is None


def test_a_finished_bar_or_a_line_after_the_bar_is_no_cut_bar(tmp_path: Path) -> None:
    cut = _run(
        tmp_path, [BAR, "RuntimeError: CUDA error: an illegal memory access was encountered"]
    )
    assert cut.record.to_json()["capture_error"]["placed_by"] == "capture_bar"
    done = BAR.replace("9%", "100%").replace("3/35", "35/35")
    whole = _run(
        tmp_path, [done, "RuntimeError: CUDA error: an illegal memory access was encountered"]
    )
    err = whole.record.to_json()["capture_error"]
    assert err is None or err["placed_by"] != "capture_bar"
