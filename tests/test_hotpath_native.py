"""The compiled scanner (``diag/ingest/hotpath/_cscan*.c``) against the RE2 kinds it replaces.

The C matchers must accept a SUBSET of what each kind's RE2 pattern (+ validate, exclude,
extras) accepts, with the same values cell for cell; a line C rejects must still reach the
per-line parsers (the anchor pass finds it). Hypothesis builds lines at the grammar's edges:
ints of 15/16 digits, long and signed numbers, missing and half-written optional groups,
``[.,]`` separators, ``.ms`` of 0-7 digits, rank lists, CRLF, trailing blanks, cut lines,
non-ASCII bytes, quotes and excluded words in request lines. The oracle test
(``test_hotpath_oracle.py``) checks the whole ingest with both extractions.
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from diag.ingest import parsers_for
from diag.ingest.hotpath import BlockResult, HotPath
from diag.ingest.hotpath.native import ENV_NATIVE, NativeScanner, native_available
from tests.property_material import fuzz


def test_the_extension_is_built_where_required() -> None:
    """CI sets GRAPHDIAG_REQUIRE_NATIVE=1: there the C scanner must really be built."""
    if os.environ.get("GRAPHDIAG_REQUIRE_NATIVE") == "1":
        assert native_available(), "diag.ingest.hotpath._cscan did not build (see setup.py)"
    elif not native_available():
        pytest.skip("the C extension is not built here")


needs_c = pytest.mark.skipif(not native_available(), reason="the C extension is not built")


@functools.cache
def _paths(engine: str) -> tuple[HotPath, HotPath]:
    c = HotPath.for_parsers(engine, parsers_for(engine), native=True)
    r = HotPath.for_parsers(engine, parsers_for(engine), native=False)
    assert c is not None and r is not None and c.uses_native and not r.uses_native
    return c, r


def _rows(res: BlockResult) -> dict[tuple[str, int], tuple[str, ...]]:
    """(table, line) -> the row's cells as repr (so -0.0, NaN and None are told apart)."""
    out = {}
    for table, parts in res.tables.items():
        for part in parts:
            cols = {c: a.to_pylist() for c, a in part.items()}
            for i, line in enumerate(cols["line"]):
                out[(table, line)] = tuple(f"{c}={cols[c][i]!r}" for c in sorted(cols))
    return out


def compare(engine: str, lines: list[bytes]) -> tuple[int, int]:
    """C rows are RE2 rows (same values); what C leaves, the anchor pass hands on.
    Returns (rows C, rows RE2)."""
    c_path, r_path = _paths(engine)
    block = b"".join(lines)
    c, r = c_path.extract(block, 1, "x.log"), r_path.extract(block, 1, "x.log")
    c_rows, r_rows = _rows(c), _rows(r)
    for key, cells in c_rows.items():
        assert key in r_rows, f"C accepts what RE2 does not: {lines[key[1] - 1]!r}"
        assert cells == r_rows[key], f"{lines[key[1] - 1]!r}:\n{cells}\n{r_rows[key]}"
    left = set(r.consumed.tolist()) - set(c.consumed.tolist())
    assert set(c.consumed.tolist()) <= set(r.consumed.tolist())
    assert set(c.fallback.tolist()) == set(r.fallback.tolist()) | left
    return len(c_rows), len(r_rows)


# ---------------------------------------------------------------- SGLang line material
def digits(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=lo, max_size=hi)


def mostly(plain: st.SearchStrategy[str], edge: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``plain`` 15 times in 16, else ``edge``: many lines stay inside the grammar."""
    return st.integers(0, 15).flatmap(lambda i: plain if i < 15 else edge)


INT = mostly(
    digits(1, 5),
    st.one_of(digits(14, 16), st.sampled_from(["", "-1", "1,000", "0" * 15, "9" * 16])),
)
NUM = mostly(
    st.builds(lambda a, b: a + b, digits(1, 4), st.sampled_from(["", ".5", ".25", ".03"])),
    st.one_of(
        st.builds(
            lambda s, a, b: s + a + "." + b, st.sampled_from(["", "-"]), digits(1, 3), digits(1, 25)
        ),
        digits(15, 24),
        st.sampled_from(["-0", "-0.0", "1.", ".5", "1e5", "nan", "-", "0.30000000000000004"]),
    ),
)
BOOL = mostly(st.sampled_from(["True", "False"]), st.sampled_from(["Maybe", "true", ""]))
DEV = mostly(
    st.sampled_from(["cuda", "cpu", "npu", "musa", "xpu", "device"]),
    st.sampled_from(["gpu", "CUDA", "cuda "]),
)
RANK = mostly(
    st.sampled_from([" TP0", " DP1 TP3 EP2", "", " TP-1", " PP_X12"]),
    st.sampled_from([" tp0", " TP", "  TP0", " TP0 ", " T-P0"]),
)
MS = mostly(
    st.sampled_from(["", ".250", ",5", ".123456"]), st.sampled_from([".1234567", ".", ",x"])
)
END = mostly(
    st.sampled_from(["\n", "\r\n", ", \n", " \t\n", ", \r\n"]),
    st.sampled_from([",\n", "", "\r", " x\n", ",  \n", ", ,\n"]),
)


@st.composite
def sg_header(draw: st.DrawFn) -> str:
    date = draw(mostly(st.just("2025-06-10"), st.sampled_from(["2025-13-40", "2025-6-10"])))
    time_ = draw(mostly(st.just("08:00:00"), st.sampled_from(["23:59:59", "8:00:00", "99:99:99"])))
    after = draw(mostly(st.just("] "), st.sampled_from(["]", "]  ", " ] "])))
    return f"[{date} {time_}{draw(MS)}{draw(RANK)}{after}"


@st.composite
def sg_decode(draw: st.DrawFn) -> str:
    acc = ""
    if draw(st.booleans()):
        acc = f"accept len: {draw(NUM)}, "
        if draw(st.booleans()):
            acc += f"accept rate: {draw(NUM)}, "
    graph = draw(st.sampled_from(["", "dev"]))
    if graph:
        graph = f"{draw(DEV)} graph: {draw(BOOL)}, "
    sep = draw(st.sampled_from([",", ".", ";"]))
    return (
        f"Decode batch{sep} #running-req: {draw(INT)}, #token: {draw(INT)}, token usage: "
        f"{draw(NUM)}, {acc}{graph}gen throughput (token/s): {draw(NUM)}, #queue-req: "
        f"{draw(INT)}"
    )


@st.composite
def sg_prefill(draw: st.DrawFn) -> str:
    tail = draw(st.sampled_from(["", "a", "b", "c"]))
    if tail == "a":
        tail = f", input throughput (token/s): {draw(NUM)}, {draw(DEV)} graph: {draw(BOOL)}"
    elif tail == "b":
        tail = f", {draw(DEV)} graph: {draw(BOOL)}, input throughput (token/s): {draw(NUM)}"
    elif tail == "c":
        tail = f", {draw(DEV)} graph: {draw(BOOL)}"
    sep = draw(st.sampled_from([",", "."]))
    return (
        f"Prefill batch{sep} #new-seq: {draw(INT)}, #new-token: {draw(INT)}, #cached-token: "
        f"{draw(INT)}, token usage: {draw(NUM)}, #running-req: {draw(INT)}, #queue-req: "
        f"{draw(INT)}{tail}"
    )


RID = st.sampled_from(["abc123", "", "a'b", "\u00e9t\u00e9", "x" * 40, "r-1_2.3"])
WORDS = st.sampled_from(
    [
        "",
        "Capture",
        "repeated",
        "Decode batch",
        "<|im_start|>",
        "^",
        "\x01",
        "\t",
        "Receive:",
        "\u00e9",
        "%|",
        "rid='",
        "'prompt_tokens': 7",
    ]
)


@st.composite
def sg_request(draw: st.DrawFn) -> str:
    what = draw(st.sampled_from(["Receive", "Finish"]))
    rid = draw(RID)
    body = f"obj=GenerateReqInput(rid='{rid}', text='hi {draw(WORDS)} there')"
    if what == "Finish" or draw(st.booleans()):
        pt, ct = draw(INT), draw(INT)
        body += f", out={{'meta_info': {{'prompt_tokens': {pt}, 'completion_tokens': {ct}}}}}"
    if draw(st.booleans()):
        body = body.replace("rid=", "rid=''; rid=")
    return f"{what}: {body}"


@st.composite
def sg_line(draw: st.DrawFn) -> bytes:
    msg = draw(st.one_of(sg_decode(), sg_prefill(), sg_request()))
    return _damage(draw, (draw(sg_header()) + msg + draw(END)).encode())


def _damage(draw: st.DrawFn, raw: bytes) -> bytes:
    """Now and then a cut line or one byte replaced; one line each."""
    how = draw(st.integers(0, 7))
    if how == 0:  # a cut line
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif how == 1:  # one byte replaced (non-ASCII, control, delimiter)
        i = draw(st.integers(0, max(0, len(raw) - 1)))
        b = draw(st.sampled_from([b"\xe9", b"\x00", b"\x7f", b" ", b"]", b"9", b"\r", b"'"]))
        raw = raw[:i] + b + raw[i + 1 :]
    if not raw.endswith(b"\n"):
        raw += b"\n"  # one line each (the last line of a block is tested by the oracle)
    return raw


CANONICAL = [
    b"[2025-06-10 08:00:00 TP0] Decode batch, #running-req: 39, #token: 29016, token usage: "
    b"0.03, cuda graph: True, gen throughput (token/s): 1026.63, #queue-req: 0, \n",
    b"[2025-06-10 08:00:00.250 DP1 TP3 EP2] Decode batch. #running-req: 1, #token: 2, token "
    b"usage: 1.00, accept len: 3.25, accept rate: 0.8, gen throughput (token/s): -1.5, "
    b"#queue-req: 7\r\n",
    b"[2025-06-10 08:00:00 TP0] Prefill batch, #new-seq: 3, #new-token: 4179, #cached-token: "
    b"365, token usage: 0.35, #running-req: 40, #queue-req: 0, \n",
    b"[2025-06-10 08:00:00 TP1] Prefill batch. #new-seq: 3, #new-token: 4179, #cached-token: "
    b"365, token usage: 0.35, #running-req: 40, #queue-req: 0, cuda graph: False, input "
    b"throughput (token/s): 12.5\n",
    b"[2025-06-10 08:00:00] Receive: obj=GenerateReqInput(rid='eece', text='a b', "
    b"sampling_params={'max_new_tokens': 128})\n",
    b"[2025-06-10 08:00:01,5] Finish: obj=GenerateReqInput(rid='eece'), out={'meta_info': "
    b"{'prompt_tokens': 1838, 'completion_tokens': 24}}\n",
]


@needs_c
def test_canonical_sglang_lines_all_go_the_c_way() -> None:
    """Not vacuous: the plain shapes are accepted by C, as by RE2, with the same values."""
    assert compare("sglang", CANONICAL) == (len(CANONICAL), len(CANONICAL))


@needs_c
@fuzz(100)
@given(st.lists(sg_line(), min_size=1, max_size=30))
def test_c_sglang_matchers_accept_a_subset_of_re2_with_its_values(lines: list[bytes]) -> None:
    compare("sglang", lines)


# ---------------------------------------------------------------- vLLM line material
PHEAD = mostly(
    st.sampled_from(["", "(EngineCore_DP0 pid=123) ", "(VllmWorker rank=1 pid=9) ", "(pid=7) "]),
    st.sampled_from(
        [
            "(APIServer pid=1, ip=10.0.0.1) ",
            "( pid=7)",
            "(Xpid=1) ",
            "(W rank= pid=1) ",
            "(pid=) ",
            "(A pid=1, ip=\u00e9) ",
            "(A pid=1)\t",
            "(1A pid=1) ",
        ]
    ),
)
LEVEL = mostly(
    st.sampled_from(["DEBUG", "INFO", "WARNING"]),
    st.sampled_from(["WARN", "ERROR", "CRITICAL", "TRACE", "INFOX", "info"]),
)


@st.composite
def vl_header(draw: st.DrawFn) -> str:
    when = draw(
        mostly(st.just("10-31 12:00:01"), st.sampled_from(["13-45 25:61:61", "1-31 12:00"]))
    )
    frac = draw(mostly(st.sampled_from(["", ".123"]), st.sampled_from([",5", ".", ".x"])))
    gap = draw(mostly(st.just(" "), st.sampled_from(["\t", "  ", ""])))
    where = draw(
        mostly(
            st.sampled_from(
                ["[gpu_model_runner.py:1234] ", "[core.py:9]", "[v1/engine/core.py:77] "]
            ),
            st.sampled_from(
                ["gpu_model_runner.py:12] ", "[x.py] ", "[x.py:] ", "[x.py:1]  ", "[:1] "]
            ),
        )
    )
    return f"{draw(PHEAD)}{draw(LEVEL)} {when}{frac}{gap}{where}"


@st.composite
def vl_step(draw: st.DrawFn) -> str:
    mode = draw(
        mostly(
            st.sampled_from(["FULL", "NONE", "PIECEWISE", "FULL_DECODE_ONLY"]),
            st.sampled_from(["full", "", "FULL1"]),
        )
    )
    prefix = draw(mostly(st.sampled_from(["", "CUDAGraphMode."]), st.just("CUDAGraphMode")))
    reqs = draw(mostly(st.one_of(INT, st.just("None")), st.just("none")))
    uni = draw(mostly(st.sampled_from(["uniform", "uniform_decode"]), st.just("uniformly")))
    lora = draw(mostly(st.sampled_from(["", ", has_lora=False"]), st.just(", has_lora=1")))
    ub = draw(
        mostly(
            st.sampled_from(["", ", should_ubatch: False, num_tokens_across_dp: None"]),
            st.just(", should_ubatch: False"),
        )
    )
    return (
        f"Running batch with cudagraph_mode: {prefix}{mode}, batch_descriptor: BatchDescriptor("
        f"num_tokens={draw(INT)}, num_reqs={reqs}, {uni}={draw(BOOL)}{lora}){ub}"
    )


@st.composite
def vl_stats(draw: st.DrawFn) -> str:
    eng = draw(mostly(st.sampled_from(["", "Engine 000: ", "Engine 12: "]), st.just("Engine x: ")))
    hit = draw(
        mostly(
            st.sampled_from(["", ", Prefix cache hit rate: 0.0%"]),
            st.just(", Prefix cache hit rate: 1"),
        )
    )
    return (
        f"{eng}Avg prompt throughput: {draw(NUM)} tokens/s, Avg generation throughput: "
        f"{draw(NUM)} tokens/s, Running: {draw(INT)} reqs, Waiting: {draw(INT)} reqs, GPU KV "
        f"cache usage: {draw(NUM)}%{hit}"
    )


VRID = mostly(
    st.sampled_from(["cmpl-abc123-0", "chatcmpl-9f8e", "r_1", "x" * 256]),
    st.sampled_from(["", "a.b", "x" * 257, "a b", "\u00e9"]),
)


@st.composite
def vl_request(draw: st.DrawFn) -> str:
    rid = draw(VRID)
    if draw(st.booleans()):
        return f"Added request {rid}" + draw(mostly(st.sampled_from(["", "."]), st.just("..")))
    mt = draw(mostly(INT, st.sampled_from(["", "x", "9" * 16])))
    key = draw(mostly(st.just(", max_tokens="), st.sampled_from([", xmax_tokens=", "max_tokens="])))
    words = draw(
        mostly(
            st.sampled_from(["", "hi there", "\t"]),
            st.sampled_from(
                [
                    "'",
                    '"',
                    "%",
                    "<",
                    "^",
                    "|",
                    "\u00e9",
                    "repeated",
                    "prompt_token_ids",
                    "max_tokens=5",
                    "SamplingParams(",
                ]
            ),
        )
    )
    return (
        f"Received request {rid}: prompt: {words}, params: SamplingParams(n=1, "
        f"min_tokens=0{key}{mt}, temperature=0.7), lora_request: None"
    )


@st.composite
def vl_line(draw: st.DrawFn) -> bytes:
    msg = draw(st.one_of(vl_step(), vl_stats(), vl_request()))
    return _damage(draw, (draw(vl_header()) + msg + draw(END)).encode())


CANONICAL_VLLM = [
    b"(EngineCore_DP0 pid=4242) DEBUG 10-31 12:00:01 [gpu_model_runner.py:1234] Running batch "
    b"with cudagraph_mode: FULL, batch_descriptor: BatchDescriptor(num_tokens=64, num_reqs=None,"
    b" uniform_decode=False, has_lora=False)\n",
    b"DEBUG 10-31 12:00:01.250 [gpu_model_runner.py:1234] Running batch with cudagraph_mode: "
    b"CUDAGraphMode.NONE, batch_descriptor: BatchDescriptor(num_tokens=37, num_reqs=5, "
    b"uniform=True), should_ubatch: False, num_tokens_across_dp: None\r\n",
    b"(APIServer pid=1) INFO 10-31 12:00:02 [loggers.py:127] Engine 000: Avg prompt throughput:"
    b" 12.5 tokens/s, Avg generation throughput: 300.1 tokens/s, Running: 8 reqs, Waiting: 0 "
    b"reqs, GPU KV cache usage: 3.2%, Prefix cache hit rate: 0.0%\n",
    b"INFO 10-31 12:00:02 [logger.py:39] Received request cmpl-1-0: prompt: 'hi', params: "
    b"SamplingParams(n=1, max_tokens=16), lora_request: None.\n".replace(b"'", b""),
    b"INFO 10-31 12:00:02 [engine.py:300] Added request cmpl-1-0.\n",
]


@needs_c
def test_canonical_vllm_lines_all_go_the_c_way() -> None:
    assert compare("vllm", CANONICAL_VLLM) == (len(CANONICAL_VLLM), len(CANONICAL_VLLM))


@needs_c
@fuzz(100)
@given(st.lists(vl_line(), min_size=1, max_size=30))
def test_c_vllm_matchers_accept_a_subset_of_re2_with_its_values(lines: list[bytes]) -> None:
    compare("vllm", lines)


# ---------------------------------------------------------------- the anchor pass
@needs_c
@fuzz(200)
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(min_codepoint=1, max_codepoint=300, blacklist_characters="\n")),
            st.sampled_from(["", "Capture", "Captur", "new fill batch", "it/s]", "Error", "rror"]),
            st.text(max_size=5, alphabet="ab\r\t"),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(["sglang", "vllm"]),
)
def test_the_c_anchor_pass_finds_the_lines_python_re_finds(
    parts: list[tuple[str, str, str]], engine: str
) -> None:
    lines = [(a + w + b + "\n").encode() for a, w, b in parts]
    anchors = sorted({a for p in parsers_for(engine) for a in p.anchors})
    rx = re.compile("|".join(re.escape(a) for a in anchors).encode())
    scanner = NativeScanner((), anchors)
    block = b"".join(lines)
    offsets = np.cumsum([0] + [len(x) for x in lines]).astype(np.int64)
    got = scanner.anchor_lines(block, offsets, np.arange(len(lines), dtype=np.int64))
    assert got.tolist() == [rx.search(x) is not None for x in lines]


@needs_c
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_c_anchor_pass_finds_each_anchor_wherever_it_stands(engine: str) -> None:
    """Each literal is indexed by one 4-byte window of it, not always its head (the rarest,
    ``_cscan.c`` rarest_window): every anchor at a line's start, inside it, at its very end,
    and cut short by one byte at either end (not there then), as Python finds them."""
    anchors = sorted({a for p in parsers_for(engine) for a in p.anchors})
    rx = re.compile("|".join(re.escape(a) for a in anchors).encode())
    scanner = NativeScanner((), anchors)
    lines = []
    for a in anchors:
        w = a.encode()
        lines += [w + b"\n", w, b"xy " + w + b" z\n", b"~" * 40 + w, w[1:] + b"\n", w[:-1]]
        lines += [b"#" + w[:-1], w[1:] + b"#" * 3 + b"\n"]
    block = b"".join(lines)
    offsets = np.cumsum([0] + [len(x) for x in lines]).astype(np.int64)
    got = scanner.anchor_lines(block, offsets, np.arange(len(lines), dtype=np.int64))
    want = [rx.search(x) is not None for x in lines]
    assert got.tolist() == want
    assert sum(want) >= 4 * len(anchors)  # each planted whole is found (and some cut ones)


def test_without_the_extension_the_hot_path_runs_on_re2(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without a compiler has no ``_cscan``: the RE2 path, same rows."""
    from diag.ingest.hotpath import native

    block = b"".join(CANONICAL)
    expected = _rows(_paths("sglang")[1].extract(block, 1, "x.log")) if native_available() else None
    monkeypatch.setattr(native, "_cscan", None)
    monkeypatch.setenv(ENV_NATIVE, "1")
    hp = HotPath.for_parsers("sglang", parsers_for("sglang"))
    assert hp is not None and not hp.uses_native
    got = _rows(hp.extract(block, 1, "x.log"))
    assert len(got) == len(CANONICAL)
    if expected is not None:
        assert got == expected


def test_native_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from diag.ingest.hotpath.native import native_enabled

    monkeypatch.setenv(ENV_NATIVE, "0")
    assert not native_enabled()
    monkeypatch.setenv(ENV_NATIVE, "1")
    assert native_enabled() == native_available()
    assert not native_enabled(False)


@needs_c
@given(
    st.lists(
        st.sampled_from([b"\n", b"a", b"\r\n", b"\x00", b"\xff", b"Decode batch. #running-req: 1"]),
        max_size=3000,
    ),
    st.integers(0, 31),
)
def test_the_c_newline_count_is_bytes_count(pieces: list[bytes], cut: int) -> None:
    """Every length (the 16-byte lanes, the 4080-byte rounds, the tail) and every offset."""
    from diag.ingest.hotpath import native

    block = b"".join(pieces)
    view = memoryview(block)[min(cut, len(block)) :]
    assert native.count_newlines(view) == bytes(view).count(b"\n")
    assert native.count_newlines(block) == block.count(b"\n")


@needs_c
def test_vllm_received_stop_strings_c_and_re2_agree() -> None:
    """Quotes, "<|", "%", "|" and non-ASCII in SamplingParams' reprs: both matchers take the
    line; a "<" right after a digit (a tqdm tail) and a caret escape: neither does."""
    head = b"(APIServer pid=1) INFO 03-08 09:00:00 [request_logger.py:66] Received request r-1: "
    body = b"params: SamplingParams(n=1, stop=%s, max_tokens=9), lora_request: None.\n"
    plain = [b"['<|im_end|>']", b'["it\'s"]', b"['50%', 'a|b']", "['caf\u00e9']".encode()]
    assert compare("vllm", [head + body % s for s in plain]) == (len(plain), len(plain))
    for s in (b"['00:01<00:02']", b"['^[[0m']"):
        assert compare("vllm", [head + body % s]) == (0, 0)


@pytest.mark.parametrize("native", [True, False])
def test_the_shared_header_cache_is_bounded_and_changes_no_row(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every scanner of a process shares one reader, so its cache of header values (one per
    distinct second of every log) is emptied at its limit; values read again are the same."""
    from diag.ingest.hotpath import extract

    if native and not native_available():
        pytest.skip("the C extension is not built here")
    lines = [
        f"[2025-06-10 08:{i // 60:02d}:{i % 60:02d} TP{i % 3}] Decode batch, #running-req: {i}, "
        f"#token: 9, token usage: 0.03, cuda graph: True, gen throughput (token/s): 1.0, "
        f"#queue-req: 0, \n".encode()
        for i in range(300)
    ]
    block = b"".join(lines)
    anchors = [a for p in parsers_for("sglang") for a in p.anchors]
    unbounded = _rows(extract.HotPath("sglang", anchors, native).extract(block, 1, "x.log"))
    monkeypatch.setattr(extract._HeaderCache, "LIMIT", 7)
    small = extract.HotPath("sglang", anchors, native)
    assert _rows(small.extract(block, 1, "x.log")) == unbounded
    assert len(unbounded) == 300 and 0 < len(small._cache._sg_ts) <= 7
