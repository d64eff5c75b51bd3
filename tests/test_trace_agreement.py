"""The C and the all-Python trace readers agree on broken traces: the same events, the same
problems in the same words, positions in bytes of the document on both (issue 36).

A seeded fuzz over a generated serving trace (fixtures/gen/traces.py): cut at any byte, its
gzip cut at any byte, a token that is no event put between two events (a scalar, a stray
closer, a quote, an object or array opened and never closed, an event cut after a number
glued to the next event), and byte edits anywhere (a JSON token or an invalid byte put in,
a range deleted or repeated). Where the C scan meets what is not an event, or the end inside
the array, it hands the rest to the text reader; an event it cannot prove well-formed (a
strict subset of the grammar, _tracescan.c valid_json) goes to the decoder rather than being
dropped or read in C: one recovery rule, one wording.
"""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path
from typing import Any

import pytest

from diag.artifacts import trace_reader as tr
from diag.artifacts.trace import analyse
from diag.artifacts.trace_reader import TraceError, read_trace
from gen.traces import serving_steps, trace_chunks, write_trace

pytestmark = pytest.mark.skipif(tr._tracescan is None, reason="C extension not built")
TOKENS = (b"1,", b'"x",', b"null,", b"[1,2],", b"]", b"}", b'"', b"{", b"[", b"tru", b",,")
TOKENS += (b'{"cat": "kernel", "ts": 1',)  # a GPU op cut after a number: "1{" glues on
EDITS = (b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":", b"NaN", b"1e999", b"\xff", b"\x00")


def _read(path: Path, native: bool) -> tuple[Any, ...]:
    try:
        raw = read_trace(path, native=native)
    except TraceError as exc:
        return ("refused", str(exc))
    return ("read", raw.events, tuple(raw.problems), dict(raw.missing), analyse(raw).summary)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    steps = serving_steps(9, 1767225600.0, ("graph", "piecewise", "eager", "lost"), filler=3)
    path = tmp_path_factory.mktemp("trace") / "g.json"
    write_trace(path, trace_chunks(steps, rank=1, world=2))
    return path.read_bytes()


@pytest.mark.parametrize("seed", range(6))
def test_both_readers_agree_on_broken_traces(trace: bytes, seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    bounds = [m.end() for m in re.finditer(rb"\},\s*", trace)]
    packed = gzip.compress(trace, mtime=0)
    differ = []
    for k in range(24):
        kind = k % 4
        if kind == 3:
            data = _edit(trace, rng)
        elif kind == 0:
            data = trace[: rng.randrange(len(trace))]
        elif kind == 1:
            at = rng.choice(bounds)
            data = trace[:at] + rng.choice(TOKENS) + trace[at:]
        else:
            data = packed[: rng.randrange(len(packed))]
        path = tmp_path / f"m{k}.json"
        path.write_bytes(data)
        native, text = _read(path, True), _read(path, False)
        if native != text:
            differ.append((k, kind, str(native)[:300], str(text)[:300]))
    assert not differ, differ


def _edit(trace: bytes, rng: random.Random) -> bytes:
    out = bytearray(trace)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out))
        op = rng.randrange(3)
        if op == 0:
            out[at:at] = rng.choice(EDITS)
        elif op == 1:
            del out[at : at + rng.randint(1, 40)]
        else:
            src = rng.randrange(len(out))
            out[at:at] = out[src : src + rng.randint(1, 200)]
    return bytes(out)


def test_positions_are_bytes_on_both_paths(trace: bytes, tmp_path: Path) -> None:
    """A multi-byte name before a malformed launch: both say its byte, not its character."""
    at = trace.index(b'"name": "') + len(b'"name": "')
    data = trace[:at] + "Ünïcødé ".encode() + trace[at:]
    cut = data.index(b"},", len(data) // 2) + 2
    data = data[:cut] + b'{"cat": "cuda_runtime", "ph": X},' + data[cut:]
    path = tmp_path / "u.json"
    path.write_bytes(data)
    native, text = _read(path, True), _read(path, False)
    assert native == text
    assert any(f"byte {cut}" in p for p in native[2]), native[2]
