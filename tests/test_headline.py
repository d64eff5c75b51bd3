"""An error's headline: the first line, with a hard wrap joined back (diag.model.headline).

A message hard-wrapped by a terminal or a forum reply is quoted whole in the finding and the
verdict, not cut at the fold; a line that ends a sentence ends it (SGLang's advice block after
the exception stays out).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from diag.api import analyze
from diag.model import headline

MSG = (
    "RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture unless "
    "the CPU tensor is pinned. If you need this call to be captured, please file an issue."
)


def test_a_folded_message_is_joined_back() -> None:
    for width in (30, 50, 80):
        assert headline("\n".join(textwrap.wrap(MSG, width))) == MSG, width


def test_a_sentence_end_ends_the_headline() -> None:
    text = "Exception: Capture cuda graph failed: CUDA out of memory.\nPossible solutions:\n1. x"
    assert headline(text) == "Exception: Capture cuda graph failed: CUDA out of memory."
    assert headline("ValueError: bad\n\nmore") == "ValueError: bad"


def test_the_finding_quotes_the_whole_folded_message(tmp_path: Path) -> None:
    log = tmp_path / "paste.log"
    log.write_text("\n".join(textwrap.wrap(MSG, 50)) + "\n", encoding="utf-8")
    run = analyze([str(log)], generated_at="fixed").runs[0]
    gd100 = next(f for f in run.findings if f.code == "GD100")
    assert MSG in gd100.message and ".." not in gd100.message
    assert run.record.to_json()["capture_error"]["message"] == MSG
