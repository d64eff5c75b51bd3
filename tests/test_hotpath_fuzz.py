"""Differential fuzzing of the bulk path against the per-line path on real lines: every
mutation of a real periodic or request line (truncation at every position, huge and negative
numbers, NUL, a lone CR at a block end, no final newline, lines across an 8 MiB block
boundary, 1 MB request ids, other parsers' triggers planted in request text) gives the same
event tables both ways, and never an exception. ``bench/sanitize.sh`` runs this module with
the C scanner built under AddressSanitizer and UBSan, where a memory error aborts it.

Real lines: the shared corpora's lines that hold a bulk kind's literal (``../shared``), and
``bench/gen_logs.py``'s (always there)."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.events import EventSink
from diag.ingest import parsers_for
from diag.ingest.hotpath import HotScanner
from diag.ingest.hotpath.kinds import ENGINE_KINDS
from diag.parsers.scan import StreamScanner
from tests.conftest import CORPUS, ROOT
from tests.property_material import fuzz, mutate_bytes
from tests.test_hotpath_oracle import assert_same_tables

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

BLOCK = 8 << 20  # the stream reader's block: a line across it is cut between two blocks


@cache
def real_lines(engine: str) -> tuple[bytes, ...]:
    """Lines of one engine that a bulk kind would look at: corpus first, generator too."""
    marks = [k.literal for k in ENGINE_KINDS[engine]]
    out: list[bytes] = []
    for sub in ("real", "real-2", "real-3"):
        root = CORPUS / sub
        if not root.is_dir():
            continue
        for path in sorted(root.glob(f"{engine}*.log")):
            for ln in path.read_bytes().split(b"\n"):
                if any(m in ln for m in marks) and len(ln) < 4000:
                    out.append(ln)
    make = gen_logs.sglang_lines if engine == "sglang" else gen_logs.vllm_lines
    gen = [ln.encode() for ln in make(200_000, seed=11)]
    out += [ln for ln in gen if any(m in ln for m in marks)][:400]
    return tuple(dict.fromkeys(out))


def _tables(cls: type[StreamScanner], engine: str, blocks: list[bytes]) -> object:
    sink = EventSink()
    scanner = cls(parsers_for(engine), sink, engine)
    if isinstance(scanner, HotScanner):
        scanner.min_region_bytes = 0
    scanner.scan_blocks("x.log", blocks)
    scanner.close()
    return sink.to_tables()


def same(engine: str, data: bytes, cuts: list[int] | None = None) -> None:
    at = sorted({c % (len(data) + 1) for c in cuts or []})
    blocks = [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]
    pure = _tables(StreamScanner, engine, [data])
    hot = _tables(HotScanner, engine, blocks)
    assert_same_tables(pure, hot, f"{engine} cut at {at}")  # type: ignore[arg-type]


_DIGITS = re.compile(rb"\d+")


@st.composite
def damaged(draw: st.DrawFn, engine: str) -> bytes:
    """One real line with one of the damages the scanners must survive."""
    pool = real_lines(engine)
    line = draw(st.sampled_from(pool))
    how = draw(
        st.sampled_from(("cut", "huge", "negative", "nul", "bytes", "trigger", "cr", "unicode"))
    )
    if how == "cut":
        return line[: draw(st.integers(0, len(line)))]
    if how in ("huge", "negative"):
        runs = list(_DIGITS.finditer(line))
        if not runs:
            return line
        m = runs[draw(st.integers(0, len(runs) - 1))]
        new = b"9" * draw(st.sampled_from((15, 16, 19, 309, 400, 5000))) if how == "huge" else b"-5"
        return line[: m.start()] + new + line[m.end() :]
    if how == "nul":
        at = draw(st.integers(0, len(line)))
        return line[:at] + b"\x00" + line[at:]
    if how == "bytes":
        return draw(mutate_bytes(line)).replace(b"\n", b" ")
    if how == "trigger":  # another parser's trigger in the line (its anchors)
        words = sorted({a for p in parsers_for(engine) for a in p.anchors})
        word = draw(st.sampled_from(words)).encode()
        at = draw(st.integers(0, len(line)))
        return line[:at] + word + line[at:]
    if how == "unicode":
        runs = list(_DIGITS.finditer(line))
        if not runs:
            return line
        m = runs[draw(st.integers(0, len(runs) - 1))]
        return line[: m.end()] + "\u0663".encode() + line[m.end() :]
    return line + b"\r"


@fuzz(60)
@given(st.sampled_from(("sglang", "vllm")), st.data())
def test_damaged_real_lines_read_alike(engine: str, data: st.DataObject) -> None:
    lines = data.draw(st.lists(damaged(engine), min_size=1, max_size=30))
    plain = list(real_lines(engine)[:20])
    end = data.draw(st.sampled_from((b"\n", b"", b"\r", b"\r\n")))  # no final newline, lone CR
    body = b"\n".join(plain + lines) + end
    cuts = data.draw(st.lists(st.integers(0, 10**9), max_size=6))
    same(engine, body, cuts)


def test_every_truncation_of_real_lines_reads_alike() -> None:
    for engine in ("sglang", "vllm"):
        for line in real_lines(engine)[:: max(1, len(real_lines(engine)) // 12)]:
            cut = [line[:i] for i in range(len(line) + 1)]
            same(engine, b"\n".join(cut) + b"\n")
            same(engine, b"\n".join(cut))  # the last one without its newline


def test_a_line_across_an_8_mib_block_boundary_and_a_lone_cr_at_the_block_end() -> None:
    for engine in ("sglang", "vllm"):
        pool = real_lines(engine)
        out, size, k = [], 0, 0
        while size < BLOCK + 4096:
            ln = pool[k % len(pool)]
            out.append(ln)
            size += len(ln) + 1
            k += 1
        data = b"\n".join(out) + b"\n"
        # the line that holds byte BLOCK is cut across the two blocks
        same(engine, data, [BLOCK])
        # a block that ends with a lone CR (a CRLF cut between its bytes)
        cr = data.replace(b"\n", b"\r\n")
        at = cr.index(b"\r\n", BLOCK) + 1
        same(engine, cr, [at])


def test_megabyte_request_ids() -> None:
    big = b"r" * (1 << 20)
    for engine in ("sglang", "vllm"):
        pool = [ln for ln in real_lines(engine) if b"rid='" in ln or b"request " in ln]
        if not pool:
            continue
        lines = []
        for ln in pool[:4]:
            ln = re.sub(rb"rid='[^']*'", b"rid='" + big + b"'", ln)
            ln = re.sub(rb"request ([A-Za-z0-9_.\-]+)", b"request " + big, ln, count=1)
            lines.append(ln)
        same(engine, b"\n".join(lines) + b"\n")


def test_the_corpus_is_used_when_present() -> None:
    if (CORPUS / "real").is_dir():
        assert any(not ln.startswith(b"[2025-06-10") for ln in real_lines("sglang"))
    assert Path(ROOT / "bench" / "gen_logs.py").is_file()


@fuzz(200)
@given(
    st.lists(
        st.sampled_from(["<", "]", "[", ":", "0", "12", "a", " ", "'", "|", "im_start", "\\n"]),
        max_size=40,
    )
)
def test_a_lt_after_anything_but_a_digit_splits_no_line(parts: list[str]) -> None:
    """Why the bulk request reader accepts "<" unless a digit precedes it: the normaliser
    splits a line at "<" only inside a tqdm tail ("dd:dd<"), never elsewhere."""
    from diag.normalize.lines import split_logical

    text = "[2025-06-10 08:00:00] Receive: obj=GenerateReqInput(text='" + "".join(parts) + "')"
    if re.search(r"[0-9]<", text):
        return
    assert split_logical(text) == [text]


#: what free text can hold around the searched fields (the FIND / QUOTED ops): a decoy
#: empty id, an id never closed, a non-ASCII id, a count without digits, a count past the
#: int's range, a stray quote
_SEARCH_SNIPPETS = (
    b"rid=''",
    b"rid='",
    b"rid='decoy'",
    b"rid='\xc3\xa9'",
    b"'prompt_tokens': ",
    b"'prompt_tokens': 12",
    b"'completion_tokens': " + b"9" * 16,
    b"'completion_tokens': 7",
    b"'",
)


@fuzz(80)
@given(st.data())
def test_searched_fields_in_free_text_read_alike(data: st.DataObject) -> None:
    """Request lines (declared with searched fields) with snippets planted anywhere in the
    text, the id removed or not: the same tables on both paths."""
    pool = [ln for ln in real_lines("sglang") if b"Receive: " in ln or b"Finish: " in ln]
    lines = []
    for _ in range(data.draw(st.integers(1, 8))):
        line = data.draw(st.sampled_from(pool))
        if data.draw(st.booleans()):
            line = re.sub(rb"rid='[^']*'", b"", line, count=1)
        for snippet in data.draw(st.lists(st.sampled_from(_SEARCH_SNIPPETS), max_size=4)):
            at = data.draw(st.integers(0, len(line)))
            line = line[:at] + snippet + line[at:]
        lines.append(line)
    same("sglang", b"\n".join(lines) + b"\n")


# ------------------------------------------------- whole command: plain and gz, real sizes
# (issue 36 item 4) the bulk path at the region minimum and block sizes real inputs see (no
# oracle switch): every mutated log gives the same event tables per line and in bulk, and the
# same report plain and gzipped (gzip input was read in 256 KiB steps that never reached the
# bulk path's minimum region, so its copies were read per line).
from diag.api import analyze as _analyze  # noqa: E402
from diag.ingest import ingest as _ingest  # noqa: E402
from diag.render.serialize import to_json as _to_json  # noqa: E402

_WHOLE_BYTES = 600 << 10  # past the 256 KiB head: a head region and a block region


@cache
def _whole_log(engine: str) -> bytes:
    make = gen_logs.sglang_lines if engine == "sglang" else gen_logs.vllm_lines
    return "".join(ln + "\n" for ln in make(_WHOLE_BYTES, seed=5)).encode()


def _report(path: Path) -> dict[str, object]:
    import json

    doc = json.loads(_to_json(_analyze([str(path)], generated_at="fixed", jobs=1)))
    text = json.dumps(doc).replace(str(path), "LOG")
    out = json.loads(text)
    for run in out["runs"]:
        run.pop("label", None)  # the file's own name (server.log vs server.log.gz), by design
    return out  # type: ignore[no-any-return]


@st.composite
def _mutated_log(draw: st.DrawFn) -> tuple[str, bytes]:
    engine = draw(st.sampled_from(("sglang", "vllm")))
    data = _whole_log(engine)
    lines = data.split(b"\n")
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(mutate_bytes(lines[i]))
    spot = draw(st.sampled_from(("\u00a0", "\u3000", "\u2009"))).encode()
    j = draw(st.integers(0, len(lines) - 1))
    k = draw(st.integers(0, max(len(lines[j]) - 1, 0)))
    lines[j] = lines[j][:k] + spot + lines[j][k:]
    return engine, b"\n".join(lines)


@settings(max_examples=30, deadline=None)
@given(case=_mutated_log())
def test_whole_command_plain_and_gz_and_both_paths_agree(case: tuple[str, bytes]) -> None:
    import gzip
    import tempfile

    engine, data = case
    with tempfile.TemporaryDirectory(prefix="gd-fuzz-") as tmp:
        plain = Path(tmp) / "server.log"
        plain.write_bytes(data)
        gz = Path(tmp) / "copy" / "server.log.gz"
        gz.parent.mkdir()
        gz.write_bytes(gzip.compress(data, compresslevel=1))
        for path in (plain, gz):
            pure = _ingest([str(path)], jobs=1, hotpath=False).tables
            hot = _ingest([str(path)], jobs=1, hotpath=True).tables
            assert_same_tables(pure, hot, f"{engine} {path.name}")
        a, b = _report(plain), _report(gz)
        assert a["runs"] == b["runs"], engine


def test_gz_input_reaches_the_bulk_path(tmp_path: Path) -> None:
    import gzip

    from diag.ingest.hotpath.scanner import HotScanner

    data = _whole_log("sglang")
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(data, compresslevel=1))
    seen: list[int] = []
    real = HotScanner.scan_blocks

    def spy(self: HotScanner, *a: object, **k: object) -> int:
        n = real(self, *a, **k)  # type: ignore[arg-type]
        seen.append(self.bulk_rows)
        return n

    HotScanner.scan_blocks = spy  # type: ignore[method-assign]
    try:
        _ingest([str(gz)], jobs=1, hotpath=True)
    finally:
        HotScanner.scan_blocks = real  # type: ignore[method-assign]
    plain_rows = len(data.split(b"Decode batch")) - 1
    assert seen and seen[-1] > plain_rows // 2, (seen, plain_rows)


_PYLOG_LINE = (
    "2025-12-04 20:35:5{s} INFO 151972 [{hdr}] Decode batch, #running-req: {bs}, #token: 5, "
    "token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0, \n"
)


@pytest.mark.parametrize("space", ["\u00a0", "\u3000", "\u2009"])
@pytest.mark.parametrize("where", ["sched{}x.py:222", "sched.py{}:222", "sched.py:{}222"])
def test_a_unicode_space_in_a_header_file_gives_one_rank_on_both_paths(
    tmp_path: Path, space: str, where: str
) -> None:
    """SGLANG_LOGGING_CONFIG_PATH headers ("[TP1 file.py:N]"): a Unicode space inside the
    file name was a space to the per-line regex (\\s) and a name byte to the C scanner."""
    from tests.test_hotpath_oracle import both

    hdr = "TP1 " + where.format(space)
    path = tmp_path / "x.log"
    path.write_text("".join(_PYLOG_LINE.format(s=i, bs=i + 1, hdr=hdr) for i in range(5)))
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, repr(hdr))
