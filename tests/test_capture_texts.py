"""torch's and the runtimes' capture-only messages, pasted the ways users bring them.

The texts are the signature table's own (``errors.yaml``: every capture row's ``says``, cited
there from torch's / torch-npu's / NCCL's binaries and source) and the runtimes' capture codes
(``runtime_codes.json``: cudaGetErrorString / hipGetErrorString 900-908 and the ACL capture
codes, in torch's ``CUDA error: ...`` form). Each is pasted bare, hard-wrapped at 40 columns (a
terminal or a forum reply), behind a process prefix, and hard-wrapped behind the prefix on
every line: each must be a capture failure (GD100) of the row's class. The negative: engine
messages raised outside capture code (the atlas's ``outside`` sites), hard-wrapped the same
way, must not become capture failures by the joining of their lines.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from diag.engines import atlas
from tests.test_raise_atlas import VALUES, _run

DATA = Path(__file__).resolve().parent.parent / "diag" / "engines" / "data"
PREFIX = "(RayWorkerWrapper pid=4242) "
FORMS = ("bare", "wrapped", "prefixed", "wrapped_prefixed")


def _texts() -> list[tuple[str, str, str | None]]:
    """(id, exception line, class) of every capture-only text the tables hold."""
    rows = yaml.safe_load((DATA / "errors.yaml").read_text(encoding="utf-8"))["signatures"]
    out = []
    for r in rows:
        if not r.get("capture"):
            continue
        for j, say in enumerate(r.get("says", ())):
            if len(say.strip()) >= 20:  # a fragment ("during capturing stage") is no message
                out.append((f"{r['id']}-{j}", f"RuntimeError: {say.strip()}", r.get("class")))
    codes = json.loads((DATA / "runtime_codes.json").read_text(encoding="utf-8"))["codes"]
    for c in codes:
        if c["capture"] and c["runtime"] == "cuda":
            out.append((c["name"], f"RuntimeError: CUDA error: {c['message']}", c["class"]))
    return out


def paste(head: str, form: str) -> str:
    lines = textwrap.wrap(head, 40) if form.startswith("wrapped") else [head]
    pre = PREFIX if form.endswith("prefixed") else ""
    return "".join(pre + ln + "\n" for ln in lines)


TEXTS = _texts()


def test_the_tables_hold_the_capture_texts() -> None:
    """The texts the brief names are there, so the paste test below covers them."""
    joined = "\n".join(h for _, h, _ in TEXTS)
    for words in (
        "Cannot copy between CPU and CUDA tensors during CUDA graph capture",
        "operation not permitted when stream is capturing",
        "operation failed due to a previous error during capture",
        "CUDA graphs must be captured on a non-default stream",
        "Capture must end on the same stream it began on",
        "Attempting uncaptured free of a captured allocation",
    ):
        assert words in joined, words
    assert len(TEXTS) >= 30


@pytest.mark.parametrize("form", FORMS)
def test_capture_texts_are_capture_failures_of_their_class(form: str, tmp_path: Path) -> None:
    got = _run(tmp_path, {name: paste(head, form) for name, head, _ in TEXTS})
    bad = []
    for name, _, cls in TEXTS:
        err_cls, gd100, runs = got[name]
        if runs != 1 or not gd100 or (cls is not None and err_cls != cls):
            bad.append((name, cls, got[name]))
    assert not bad, bad


@pytest.mark.parametrize("form", ("wrapped", "wrapped_prefixed"))
def test_wrapped_outside_sites_stay_outside(form: str, tmp_path: Path) -> None:
    outside = [
        s
        for s in atlas.sites()
        if s.scope == "outside" and s.level == "raise" and len(s.render(VALUES)) >= 60
    ][:60]
    assert len(outside) >= 30
    texts = {
        f"o{i}": paste(f"{s.exc_type}: {s.render(VALUES)}", form) for i, s in enumerate(outside)
    }
    got = _run(tmp_path, texts)
    wrong = [outside[int(n[1:])].source for n, (_, gd100, _) in got.items() if gd100]
    assert not wrong, wrong
