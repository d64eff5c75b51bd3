"""What the property tests of ``tests/test_properties.py`` feed the parsers.

Real-format material (lines of the fixture incidents, the fixture generators and, when
present, ``../shared/corpus/real``), the mutations applied to it, arbitrary text, and
:func:`fuzz`, the hypothesis settings every fuzz test shares (example counts scale with
``HYPOTHESIS_PROFILE``: ``ci`` runs five times as many).
"""

from __future__ import annotations

import os
import re
import tempfile
import zlib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from diag.normalize.lines import clean
from diag.normalize.prefix import peel
from tests.conftest import CORPUS, ROOT

SCALE = 5 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 1
INCIDENTS = ROOT / "fixtures" / "incidents"


def n(default: int) -> int:
    """Examples for one test under the current profile."""
    return default * SCALE


def fuzz(examples: int) -> Any:
    """Settings shared by the fuzz tests: no deadline (lark warms up), no example database.

    Under CI (``CI`` set) the examples are derandomised, so a green CI run stays green;
    locally every run explores new examples."""
    return settings(
        max_examples=n(examples),
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --------------------------------------------------------------------------- real-format material
def _read(path: Path) -> bytes:
    return _unzip(path.read_bytes())


def _unzip(data: bytes) -> bytes:
    """What a gzip holds, a cut one too (the sglang-cut-gz incident ends mid-stream)."""
    if data[:2] != b"\x1f\x8b":
        return data
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(data)


@lru_cache(maxsize=1)
def log_files() -> tuple[bytes, ...]:
    """Every real-format log we have: fixture incidents, generators, shared corpus."""
    from gen.incidents import build_all

    files = [_read(p) for p in sorted(INCIDENTS.glob("*/server.log*"))]
    for inc in build_all():
        for content in inc.files.values():
            raw = content if isinstance(content, bytes) else content.encode()
            files.append(_unzip(raw))
    real = CORPUS / "real"
    if real.is_dir():
        files += [_read(p) for p in sorted(real.glob("*.log"))]
    return tuple(files)


@lru_cache(maxsize=1)
def log_lines() -> tuple[bytes, ...]:
    """Distinct physical lines (``\\r`` redraws kept inside), capped at 8 KiB each."""
    seen: dict[bytes, None] = {}
    for data in log_files():
        for line in data.split(b"\n"):
            if line.strip():
                seen.setdefault(line[:8192], None)
    return tuple(seen)


@lru_cache(maxsize=1)
def text_lines() -> tuple[str, ...]:
    return tuple(b.decode("utf-8", "replace") for b in log_lines())


@lru_cache(maxsize=1)
def config_texts() -> tuple[str, ...]:
    """What the config parsers are handed: ``ServerArgs(...)`` and vLLM arg / config echoes."""
    out: list[str] = []
    for line in text_lines():
        for marker in ("ServerArgs(", "non-default args: ", "engine config: ", "args: ", "config="):
            i = line.find(marker)
            if i >= 0:
                out.append(line[i + (0 if marker.endswith("(") else len(marker)) :])
    return tuple(dict.fromkeys(out))


_TB_START = re.compile(r"Traceback \(most recent call last\)")


@lru_cache(maxsize=1)
def tracebacks() -> tuple[tuple[str, ...], ...]:
    """Traceback blocks of the real-format logs, as the block collects them (messages)."""
    out: list[tuple[str, ...]] = []
    for data in log_files():
        lines = data.decode("utf-8", "replace").split("\n")
        for i, line in enumerate(lines):
            m = _TB_START.search(line)
            if m is None:
                continue
            block = [line[m.start() :]]
            for nxt in lines[i + 1 : i + 60]:
                msg = peel("x", 0, clean(nxt)).msg
                block.append(msg)
                if not nxt.startswith((" ", "\t")) and not _TB_START.search(nxt) and len(block) > 3:
                    if re.match(r"^\[\d{4}-", nxt):
                        break
            out.append(tuple(block))
    return tuple(dict.fromkeys(out))


@lru_cache(maxsize=1)
def table_texts() -> tuple[str, ...]:
    """Operator tables: generated in every layout plus the shared corpus ones."""
    from gen.profiler_tables import format_table

    rows = [
        {
            "name": "aten::mm",
            "self_cpu_us": 2500.25,
            "cpu_total_us": 3000.0,
            "self_cuda_us": 0.0,
            "cuda_total_us": 12345.678,
            "calls": 30,
            "input_shapes": "[[8, 4096], [4096, 12288]]",
        },
        {
            "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "self_cpu_us": 0.0,
            "cpu_total_us": 0.0,
            "self_cuda_us": 1500.5,
            "cuda_total_us": 1500.5,
            "calls": 300,
        },
        {
            "name": "cudaGraphLaunch",
            "self_cpu_us": 20.0,
            "cpu_total_us": 20.0,
            "self_cuda_us": 0.0,
            "cuda_total_us": 0.0,
            "calls": 3,
            "input_shapes": "[]",
        },
    ]
    texts = [
        format_table(rows, layout=layout, sort_by=sort, memory=memory)
        for layout in ("cuda", "cpu")
        for sort in (None, "cpu_time_total")
        for memory in (None, "2.7", "2.8")
    ]
    corpus = CORPUS / "profiler-tables"
    if corpus.is_dir():
        texts += [
            p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpus.rglob("*.txt"))
        ]
    return tuple(texts)


@lru_cache(maxsize=1)
def snapshot_blobs() -> tuple[bytes, ...]:
    """Small generated allocator snapshots of several torch eras and protocols."""
    from gen.snapshots import write_snapshot

    blobs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (fmt, proto, pools) in enumerate(
            [
                ("2.0", 2, []),
                ("2.5", 4, [2 << 20]),
                ("2.9", 5, [1 << 20, 3 << 20]),
                ("2.3", 3, [4096]),
            ]
        ):
            path = Path(tmp) / f"s{i}.pickle"
            write_snapshot(
                path,
                default_pool_bytes=8 << 20,
                graph_pools=pools,
                torch_format=fmt,
                protocol=proto,
                oom=i == 1,
            )
            blobs.append(path.read_bytes())
    return tuple(blobs)


# --------------------------------------------------------------------------- mutations
SPECIAL = [
    "\r",
    "\n",
    "\x1b[0;36m",
    "\x1b",
    "\x00",
    "\x7f",
    "^[[0m",
    "^M",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    "=",
    ",",
    ":",
    "|",
    " | ",
    "'",
    '"',
    "\\",
    "\t",
    " ",
    "│",
    "é",
    "\ufffd",
    "…",
    "█",
    "\u2028",
    "0",
    "9",
    "-",
    ".",
    "e",
    "nan",
    "inf",
    "None",
    "True",
    "[repeated 3x across cluster]",
    "Traceback (most recent call last):",
    "Error: ",
    'File "',
    "TP0",
    "pid=1",
    "0.",
    "1e999",
    "[2025-11-03 09:00:00] ",
    "INFO 09-09 15:33:36 [x.py:1] ",
    "2025-11-03T09:00:00Z ",
]


@st.composite
def mutate(draw: st.DrawFn, text: str) -> str:
    """Random insertions, deletions, truncations, digit swaps and duplications of ``text``."""
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(("insert", "insert", "delete", "truncate", "digit", "duplicate")))
        if op == "insert" or not text:
            at = draw(st.integers(0, len(text)))
            piece = draw(st.sampled_from(SPECIAL) | st.text(min_size=1, max_size=3))
            text = text[:at] + piece + text[at:]
        elif op == "delete":
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif op == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
        elif op == "digit":
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                at = draw(st.sampled_from(digits))
                text = text[:at] + draw(st.sampled_from("0123456789-.,e x")) + text[at + 1 :]
        else:
            a = draw(st.integers(0, len(text)))
            b = draw(st.integers(a, min(len(text), a + 200)))
            text = text[:b] + text[a:b] + text[b:]
    return text


def mutated(pool: Callable[[], tuple[str, ...]]) -> st.SearchStrategy[str]:
    return st.deferred(lambda: st.sampled_from(pool()).flatmap(mutate))


@st.composite
def mutate_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """Byte-level damage: flips, insertions (invalid UTF-8 included), cuts, splices."""
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(("flip", "insert", "delete", "truncate", "splice")))
        if not data:
            op = "insert"
        if op == "flip":
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
        elif op == "insert":
            at = draw(st.integers(0, len(data)))
            data = (
                data[:at]
                + draw(
                    st.binary(min_size=1, max_size=8)
                    | st.sampled_from(
                        [b"\xff", b"\xc3(", b"\x00", b"\r", b"\x80\x04", b"c", b"\x93", b"R", b"."]
                    )
                )
                + data[at:]
            )
        elif op == "delete":
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + data[at + draw(st.integers(1, 16)) :]
        elif op == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        else:
            a = draw(st.integers(0, len(data)))
            b = draw(st.integers(a, min(len(data), a + 64)))
            at = draw(st.integers(0, len(data)))
            data = data[:at] + data[a:b] + data[at:]
    return data


ARBITRARY = st.text(max_size=300)
