"""Same meaning on both paths: a request line whose free text holds another parser's trigger
(a phase marker, an error signature, a block opener: any anchor of the active parsers) is
never consumed in bulk, so phase and error tracking see it as on the per-line path. The
planted words are the parsers' own anchors (``LineParser.anchors``), never a copied list.

Also: digits are ASCII digits on both paths, and fields are searched in the message, never
in the header."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.events import EventSink
from diag.ingest import parsers_for
from diag.ingest.hotpath import HotScanner
from diag.ingest.hotpath.kinds import ENGINE_KINDS
from diag.parsers.scan import StreamScanner
from tests.conftest import ROOT
from tests.test_hotpath_oracle import assert_same_tables

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

ANCHORS = {e: sorted({a for p in parsers_for(e) for a in p.anchors}) for e in ("sglang", "vllm")}
#: where a request line's free text is, per engine (the generator's own request shapes)
TEXT_AT = {"sglang": b"text='", "vllm": b"SamplingParams(n=1, "}


def _request_lines(engine: str) -> list[bytes]:
    make = gen_logs.sglang_lines if engine == "sglang" else gen_logs.vllm_lines
    lines = [ln.encode() for ln in make(400_000, seed=7)]
    return [ln for ln in lines if TEXT_AT[engine] in ln]


def _both(engine: str, data: bytes) -> tuple[object, object, HotScanner]:
    pure_sink = EventSink()
    pure = StreamScanner(parsers_for(engine), pure_sink, engine)
    pure.scan_blocks("x.log", [data])
    pure.close()
    hot_sink = EventSink()
    hot = HotScanner(parsers_for(engine), hot_sink, engine)
    hot.min_region_bytes = 0
    hot.scan_blocks("x.log", [data])
    hot.close()
    return pure_sink.to_tables(), hot_sink.to_tables(), hot


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_anchor_planted_in_request_text_reads_as_per_line(engine: str) -> None:
    lines = _request_lines(engine)
    assert len(lines) > 50
    at = TEXT_AT[engine]
    body = []
    for i, word in enumerate(ANCHORS[engine]):
        line = lines[i % len(lines)]
        body.append(line.replace(at, at + word.encode() + b" ", 1))
    plain = lines[: len(body)]
    data = b"\n".join(plain + body) + b"\n"
    pure, hot, scanner = _both(engine, data)
    assert_same_tables(pure, hot, f"{engine} planted anchors")  # type: ignore[arg-type]
    # the plain request lines went in bulk, none of the planted ones did but those whose
    # word the line's own literal holds anyway ("Receive:" in a Receive line)
    own = [w for w in ANCHORS[engine] if any(w in k.literal.decode() for k in ENGINE_KINDS[engine])]
    assert scanner.bulk_rows >= len(plain) * 0.9, scanner.bulk_rows
    assert scanner.bulk_rows <= len(plain) + len(own), (scanner.bulk_rows, own)


@settings(max_examples=40, deadline=None)
@given(
    engine=st.sampled_from(("sglang", "vllm")),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=30),
    digits=st.sampled_from(("\u0663", "\u0967", "\uff13", "3")),
)
def test_planted_triggers_and_unicode_digits(
    engine: str, picks: list[tuple[int, int]], digits: str
) -> None:
    """Random anchors in random request lines, and non-ASCII digits where numbers go: the
    bulk tables equal the per-line ones."""
    lines = _request_lines(engine)[:300]
    words = ANCHORS[engine]
    at = TEXT_AT[engine]
    for i, w in picks:
        j = i % len(lines)
        lines[j] = lines[j].replace(at, at + words[w % len(words)].encode() + b" ", 1)
    uni = digits.encode()
    for j in range(0, len(lines), 7):  # a digit after a field's text: ASCII on both paths
        for field in (b"'prompt_tokens': ", b"max_tokens=", b"'completion_tokens': "):
            lines[j] = lines[j].replace(field, field + b"1" + uni, 1)
    data = b"\n".join(lines) + b"\n"
    pure, hot, _ = _both(engine, data)
    assert_same_tables(pure, hot, f"{engine} planted")  # type: ignore[arg-type]


def test_vllm_max_tokens_is_searched_in_the_message_not_the_header() -> None:
    line = next(ln for ln in _request_lines("vllm") if ln.startswith(b"(") and b"max_tokens=" in ln)
    head, rest = line.split(b") ", 1)
    forged = head + b", ip=SamplingParams(max_tokens=999) " + rest
    forged = forged.replace(b"max_tokens=", b"max_tokenz=", 2).replace(
        b"max_tokenz=999", b"max_tokens=999"
    )
    pure, hot, _ = _both("vllm", forged + b"\n")
    assert_same_tables(pure, hot, "header")  # type: ignore[arg-type]
    got = pure["request"]  # type: ignore[index]
    assert 999 not in got["max_new_tokens"].dropna().tolist()


# vLLM 0.33's Received request line (vllm/entrypoints/serve/utils/request_logger.py:66-71):
# SamplingParams.__repr__ puts the stop strings and structured outputs in as Python reprs
_VL_033 = (
    "(APIServer pid=1000) INFO 03-08 09:00:00 [entrypoints/serve/utils/request_logger.py:66] "
    "Received request chatcmpl-{i:032x}: params: SamplingParams(n=1, temperature=0.6, "
    "seed=None, stop={stop}, stop_token_ids=[], bad_words=[], max_tokens={mt}, min_tokens=0, "
    "structured_outputs={so}, extra_args=None), lora_request: None."
)
_PLAIN_STOPS = [
    "['<|im_end|>', '</s>']",
    "[\"it's\", '<|eot_id|>']",
    "['50%', 'a|b', 'caf\u00e9 \u2014 \u65e5\u672c']",
    "['<think>\\n']",  # repr escapes the newline: backslash-n stays text
]
_SO = ["None", "StructuredOutputsParams(regex='(yes|no)', json=None)"]
# what normalisation rewrites, so these stay per line: a caret escape, a tqdm tail "dd:dd<"
_RAW_STOPS = ["['^[[31m']", "['[00:01<00:02, 1.5it/s]']"]


def test_vllm_received_lines_with_stop_strings_go_in_bulk_with_the_same_rows() -> None:
    plain = [
        _VL_033.format(i=i, stop=s, mt=100 + i, so=_SO[i % 2]).encode()
        for i, s in enumerate(_PLAIN_STOPS * 3)
    ]
    raw = [
        _VL_033.format(i=100 + i, stop=s, mt=7, so="None").encode()
        for i, s in enumerate(_RAW_STOPS)
    ]
    pure, hot, scanner = _both("vllm", b"\n".join([*plain, *raw]) + b"\n")
    assert_same_tables(pure, hot, "vllm stop strings")  # type: ignore[arg-type]
    assert scanner.bulk_rows == len(plain), scanner.bulk_rows
    got = hot["request"]  # type: ignore[index]
    # the tqdm tail splits its line in two (normalize.lines.split_logical): no max_tokens left
    want = sorted([7, *(100 + i for i in range(12))])
    assert sorted(got["max_new_tokens"].dropna().tolist()) == want
    assert got["max_new_tokens"].isna().sum() == 1
