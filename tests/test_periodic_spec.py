"""Each periodic line is declared once (``diag.lines.periodic``); the per-line matcher,
the RE2 pattern and the C scanner's op table are derived from it. Rewording a declaration
changes all three, on behaviour: the reworded line is read by each, the old wording by none.
The lines come from ``bench/gen_logs.py`` (written by hand in the engines' formats), never
from the declarations under test."""

from __future__ import annotations

import dataclasses
import random
import re
import struct
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.ingest.hotpath.extract import HotPath
from diag.ingest.hotpath.kinds import declared
from diag.ingest.hotpath.native import NativeScanner, builder, native_available
from diag.lines import periodic
from diag.lines.periodic import LINES, LineSpec, Lit, Opt, seq
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

needs_c = pytest.mark.skipif(not native_available(), reason="the C extension is not built")
HEADS = {
    "sglang.decode": b"Decode batch",
    "sglang.prefill": b"Prefill batch",
    "vllm.step": b"Running batch with cudagraph_mode",
    "vllm.stats": b"Avg prompt throughput",
    "vllm.iteration": b"Iteration(",
    "sglang.receive": b"Receive: ",
    "sglang.finish": b"Finish: ",
    "vllm.added": b"Added request",
    "vllm.received": b"Received request",
}


def _table_rows(n: int) -> list[bytes]:
    """Data rows of vLLM's CUDAGraph metrics table as the generator writes it (each line but
    the table's last ends in CR)."""
    rng = random.Random(5)
    rows = []
    for _ in range(n):
        u = rng.randint(1, 3000)
        rows.append((u, u + rng.randint(0, 7), rng.choice(("FULL", "PIECEWISE", "NONE")), u % 97))
    head = "(APIServer pid=1) INFO 03-08 09:00:00 [compilation/cuda_graph.py:123] "
    table = gen_logs._vl_table(head, rows)
    return [ln.encode() for ln in table if re.search(r"\] \| [0-9]", ln)]


def _sample(name: str, n: int = 40) -> list[bytes]:
    if name == "vllm.metrics_row":
        return _table_rows(n)
    make = gen_logs.sglang_lines if name.startswith("sglang") else gen_logs.vllm_lines
    lines = [ln.encode() for ln in make(300_000, seed=5)]
    got = [ln for ln in lines if HEADS[name] in ln][:n]
    assert got, name
    return got


def _msg(line: bytes) -> str:
    """The message after a plain header of either engine (the parsers' ``line.msg``)."""
    return line.decode().split("] ", 1)[1]


def _names(spec: LineSpec) -> list[str]:
    """Every column a declared line gives: its fields, the absent ones, its constants."""
    return [n for n, _ in spec.fields()] + list(spec.absent) + [n for n, _ in spec.consts]


def _three(spec: LineSpec, lines: list[bytes]) -> tuple[list[dict], list[dict], list[dict] | None]:
    """Field values of each line by the per-line matcher, RE2 and C ({} for a rejected line)."""
    rx = re.compile(spec.regex("python"), re.ASCII)
    per_line = []
    for ln in lines:
        msg = _msg(ln).rstrip("\r\n")
        m = rx.match(msg)
        if m and spec.searched:  # the parser searches the fields (search_fields)
            assert spec.search_fields(msg).items() <= spec.read(m).items(), msg[:200]
        per_line.append(spec.read(m) if m else {})
    kind = declared(spec)
    block = b"".join(ln + b"\n" for ln in lines)
    hot = HotPath(spec.engine, [], native=False)
    arr, offsets = hot.lines(block)
    idx = np.arange(len(lines))
    got = hot._re2_kind(kind, arr, idx)
    re2 = [{} for _ in lines]
    if got is not None:
        rows, _ts, _rank, cols = got
        for j, i in enumerate(rows.tolist()):
            re2[i] = {n: cols[n][j].as_py() for n in _names(spec) if n in cols}
    c: list[dict] | None = None
    if native_available():
        scanner = NativeScanner([kind], [])
        scanned = scanner.scan(spec.name, block, offsets, idx)
        cols = builder(kind)(scanned)
        c = [{} for _ in lines]
        for j, i in enumerate(scanned.idx.tolist()):
            c[i] = {n: cols[n][j].as_py() for n in _names(spec) if n in cols}
    return per_line, re2, c


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


@pytest.mark.parametrize("name", sorted(LINES))
def test_the_three_matchers_read_the_generated_lines_alike(name: str) -> None:
    spec = LINES[name]
    lines = _sample(name)
    per_line, re2, c = _three(spec, lines)
    assert all(per_line), [ln for ln, r in zip(lines, per_line, strict=True) if not r][:3]
    assert _comparable(re2) == _comparable(per_line)
    if c is not None:
        assert _comparable(c) == _comparable(per_line)


def _reword(spec: LineSpec, old: str, new: str) -> LineSpec:
    def walk(items: tuple) -> tuple:
        out = []
        for it in items:
            if isinstance(it, Lit):
                out.append(Lit(it.text.replace(old, new)))
            elif isinstance(it, periodic.Opt):
                out.append(periodic.Opt(walk(it.items)))
            elif isinstance(it, periodic.Alt):
                out.append(periodic.Alt(tuple(walk(b) for b in it.branches)))
            elif isinstance(it, periodic.Find):
                out.append(periodic.Find(walk(it.items), it.required))
            else:
                out.append(it)
        return tuple(out)

    return dataclasses.replace(spec, items=walk(spec.items), _groups={})


REWORDS = {
    "sglang.decode": ("#token: ", "#tokens: "),
    "sglang.prefill": ("#cached-token: ", "#cache-token: "),
    "vllm.step": ("batch_descriptor: ", "descriptor: "),
    "vllm.stats": ("GPU KV cache usage: ", "GPU cache usage: "),
    "vllm.iteration": (" generation tokens, ", " decode tokens, "),
    # a required search (the id): a line without it is not read in bulk
    "sglang.receive": ("rid='", "req='"),
    # an optional search: the old wording leaves the field missing
    "sglang.finish": ("'prompt_tokens': ", "'input_tokens': "),
    "vllm.added": ("Added request ", "Queued request "),
    # an optional search behind a Skip and a Bound
    "vllm.received": ("max_tokens=", "max_new_tokens="),
    # the separator of every cell (EVERY: each occurrence reworded)
    "vllm.metrics_row": ("|", ":"),
}
EVERY = {"vllm.metrics_row"}
#: rewords of an optional search: the field it reads
REWORDED_FIELD = {"sglang.finish": "prompt_tokens", "vllm.received": "max_new_tokens"}


def _kind_matchers(spec: LineSpec) -> tuple:
    kind = declared(spec)
    return kind.pattern, kind.validate, kind.extra


@pytest.mark.parametrize("name", sorted(LINES))
def test_rewording_one_declaration_changes_all_three(name: str) -> None:
    spec = LINES[name]
    old, new = REWORDS[name]
    moved = _reword(spec, old, new)
    assert moved.regex("python") != spec.regex("python")
    assert _kind_matchers(moved) != _kind_matchers(spec)
    assert moved.program() != spec.program()
    lines = _sample(name, 20)
    count = -1 if name in EVERY else 1
    reworded = [ln.replace(old.encode(), new.encode(), count) for ln in lines]
    assert reworded != lines
    fld = REWORDED_FIELD.get(name)
    for matcher_rows in _three(moved, reworded):
        if matcher_rows is not None:
            assert all(matcher_rows), "a reworded line was not read"
            if fld is not None:
                assert all(r[fld] is not None for r in matcher_rows), "the field was not read"
    for matcher_rows in _three(moved, lines):
        if matcher_rows is None:
            continue
        if fld is not None:
            assert all(r and r[fld] is None for r in matcher_rows), "the old field was read"
        else:
            assert not any(matcher_rows), "the old wording was still read"


def test_adding_a_field_is_one_edit() -> None:
    """A new optional field in the declaration is read by all three matchers."""
    spec = LINES["sglang.decode"]
    items = list(spec.items)
    at = next(i for i, it in enumerate(items) if isinstance(it, periodic.Alt)) + 1  # after usage
    items.insert(at, periodic.Opt(seq("#retracted-req: {retracted:int}, ")))
    grown = dataclasses.replace(spec, items=tuple(items), _groups={})
    lines = [
        re.sub(rb"(token usage: [0-9.]+, )", rb"\1#retracted-req: 7, ", ln, count=1)
        for ln in _sample("sglang.decode", 10)
    ]
    for rows in _three(grown, lines):
        if rows is not None:
            assert [r.get("retracted") for r in rows] == [7] * len(lines)


TAILS = [b", ", b",", b"", b" ", b"\t ", b", \r", b",\r", b"\r"]


@pytest.mark.parametrize("name", sorted(LINES))
@pytest.mark.parametrize("tail", TAILS, ids=repr)
def test_tails_of_real_logs_are_read_alike(name: str, tail: bytes) -> None:
    """Transformation: the line's own tail replaced by what collectors leave (", " with the
    blank stripped, nothing, blanks, CR): each matcher gives what it gives the plain line,
    or a comma where the line declares none makes all three refuse it."""
    spec = LINES[name]
    lines = _sample(name, 10)
    base = [ln.rstrip(b", \t\r") for ln in lines]
    plain = _three(spec, base)
    moved = _three(spec, [b + tail for b in base])
    tail_item = spec.items[-1]
    comma_ok = isinstance(tail_item, periodic.Tail) and (tail_item.comma or tail_item.text)
    for a, b in zip(plain, moved, strict=True):
        if a is None or b is None:
            continue
        if b"," in tail and not comma_ok:
            assert not any(b)
        else:
            assert _comparable(b) == _comparable(a)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 40), max_size=40), st.binary(max_size=30))
def test_c_refuses_malformed_programs(words: list[int], lits: bytes) -> None:
    """Any op table either is refused whole or scans without reading out of bounds (the
    sanitizer build runs this too)."""
    from diag.ingest.hotpath import native

    ops = struct.pack(f"<{len(words)}i", *words)
    try:
        prog = native._cscan.program(0, ops, lits, 4, 4, 0)
    except ValueError:
        return
    line = b"[2025-01-01 00:00:00] Decode batch, #running-req: 1, \n"
    offsets = np.array([0, len(line)], np.int64)
    m = 1
    out = [np.zeros(m, np.int64), np.zeros(4 * m, np.int64), np.zeros(4 * m, np.uint8)]
    out += [np.zeros(4 * m, np.float64), np.zeros(4 * m, np.uint8)]
    out += [np.zeros(m, np.int32), np.zeros(m, np.int32), np.zeros(m + 1, np.int32)]
    native._cscan.scan(prog, line, offsets, np.zeros(1, np.int64), None, *out)


def test_a_declaration_must_say_how_it_decides() -> None:
    with pytest.raises(ValueError):
        LineSpec("x", "sglang", "decode_batch", seq("Decode {a:int}"))  # no Tail
    with pytest.raises(ValueError):
        seq("{a:float}")  # no such type
    end = periodic.Tail(text=True)
    with pytest.raises(ValueError):  # a Skip or a Bound outside a Find
        LineSpec("x", "vllm", "request", (Lit("Got "), periodic.Skip(), Lit("a"), end))
    with pytest.raises(ValueError):
        LineSpec("x", "vllm", "request", (Lit("Got "), periodic.Bound(), end))
    with pytest.raises(ValueError):  # a Skip with no literal after it: nothing to search
        LineSpec(
            "x",
            "vllm",
            "request",
            (Lit("Got "), periodic.Find(seq("a{n:int}", periodic.Skip())), end),
        )


def test_a_search_is_leftmost_and_retried_past_an_empty_id() -> None:
    """``Find``: the leftmost place where the whole search matches (``re.search``), on all
    three: an empty ``rid=''`` is passed over, a later id is not taken, a count of 16+
    digits leaves the line to the per-line path's note (bulk refuses it)."""
    spec = LINES["sglang.finish"]
    head = b"[2025-06-10 08:00:00] Finish: obj=GenerateReqInput(rid='', text='<|im_start|>a', "
    lines = [
        head + b"rid='abc', x=rid='later'), out={'meta_info': {'prompt_tokens': 5, "
        b"'prompt_tokens': 6, 'completion_tokens': 9}}",
        head + b"rid='abc'), out={'prompt_tokens': , 'prompt_tokens': 8}",
        head + b"rid='abc'), out={'completion_tokens': " + b"9" * 16 + b"}",
        head + b"), out={}",
    ]
    for rows in _three(spec, lines):
        if rows is None:
            continue
        assert rows[0]["request_id"] == "abc"
        assert (rows[0]["prompt_tokens"], rows[0]["max_new_tokens"]) == (5, 9)
        assert (rows[1]["prompt_tokens"], rows[1]["max_new_tokens"]) == (8, None)
    per_line, re2, c = _three(spec, lines)
    # no id: the parser (search_fields) reads it as missing
    assert spec.search_fields(_msg(lines[3]))["request_id"] is None
    assert per_line[2]["max_new_tokens"] == 10**16 - 1  # the sink drops it, with a note
    for bulk in (re2, c):
        if bulk is not None:
            assert bulk[2] == {} and bulk[3] == {}  # left to the per-line path


def test_received_max_tokens_is_the_first_at_a_word_start_after_sampling_params() -> None:
    """vLLM's ``Received request`` (real shapes: ``gen_logs.vllm_real_lines``): on all three,
    ``max_tokens=`` is searched after ``SamplingParams(`` (Skip) at a word start (Bound):
    a ``max_tokens=`` before the repr or ending another word is not read, the next one is;
    a repr without it leaves the field missing."""
    spec = LINES["vllm.received"]
    lines = [ln.encode() for ln in gen_logs.vllm_real_lines(400_000, seed=3)]
    lines = [ln for ln in lines if b"Received request" in ln][:8]
    assert lines
    want = [int(re.search(rb" max_tokens=([0-9]+)", ln).group(1)) for ln in lines]
    moved = {
        # another word's end first: passed over
        "suffix": [ln.replace(b"(n=1, ", b"(n=1, min_max_tokens=3, ", 1) for ln in lines],
        # before the repr: not read
        "before": [ln.replace(b"params: ", b"params: max_tokens=5 ", 1) for ln in lines],
        # no repr: nothing to read
        "none": [ln.replace(b"SamplingParams(", b"BeamSearchParams(", 1) for ln in lines],
    }
    for name, rows_of in (("plain", lines), *moved.items()):
        for rows in _three(spec, rows_of):
            if rows is None:
                continue
            assert all(rows), name
            got = [r["max_new_tokens"] for r in rows]
            assert got == ([None] * len(lines) if name == "none" else want), name


def test_a_declared_field_is_its_tables_column() -> None:
    """A field is declared once, in its line: the event table of each periodic line has a
    column for every field it declares (diag.events derives them), of the field's type."""
    from diag.events import EVENT_KINDS

    kinds = {"int": "int", "num": "float", "unum": "float", "bool": "bool"}
    for spec in periodic.LINES.values():
        columns = dict(EVENT_KINDS[spec.table].fields)
        for name, typ in spec.fields():
            assert columns[name] == kinds.get(typ, "str"), (spec.name, name)


def test_a_new_field_makes_its_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a field to a declaration adds its column, nothing else to edit: the stats line
    with its prefix-cache hit rate kept (vLLM prints it; today it is read and dropped)."""
    from diag import events

    stats = periodic.VL_STATS
    kept = dataclasses.replace(
        stats,
        items=tuple(
            Opt(seq(", Prefix cache hit rate: {prefix_hit_rate:num}%"))
            if isinstance(it, Opt) and "Prefix cache" in repr(it)
            else it
            for it in stats.items
        ),
    )
    assert ("prefix_hit_rate", "num") in kept.fields()
    monkeypatch.setitem(periodic.LINES, stats.name, kept)
    before = dict(events.EVENT_KINDS["stats"].fields)
    after = dict(events._kind("stats", "doc", engine="str", preemptions="int").fields)
    assert "prefix_hit_rate" not in before
    assert after == {**before, "prefix_hit_rate": "float"}


def test_a_line_of_another_shape_is_read_by_its_labels() -> None:
    """The per-line fallback reads each declared field by the words before it: on a line of
    the declared shape it reads what the shape reads; on one merged with other text, the
    same fields."""
    spec = periodic.VL_STATS
    text = (
        "Engine 001: Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 300.0 "
        "tokens/s, Running: 7 reqs, Waiting: 2 reqs, GPU KV cache usage: 41.3%, Prefix cache "
        "hit rate: 10.0%"
    )
    shaped = re.compile(spec.regex("python"), re.ASCII).match(text)
    assert shaped is not None
    declared = spec.read(shaped)
    assert spec.search_labelled(text) == declared
    merged = "[stats] " + text.replace(", GPU", " (queue),  GPU").replace("%", "% trailing") + "!"
    assert re.compile(spec.regex("python"), re.ASCII).match(merged) is None
    assert spec.search_labelled(merged) == declared
