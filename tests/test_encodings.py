"""Encodings by BOM and by content (issue 36 item 5): a UTF-16 or UTF-32 log, with or without
a byte-order mark, plain or gzipped, is read as the UTF-8 log it would be (the same batches),
with a note naming the encoding; what is no text after decoding is refused with a reason that
names the encoding it was read as. (A UTF-16 log was "read, but made no run".)"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from diag.sources.readers import text_encoding
from tests.bad_inputs_support import GOOD, GOOD_BATCHES, cli

BOMS = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}
BOMS |= {"utf-32-le": b"\xff\xfe\x00\x00", "utf-32-be": b"\x00\x00\xfe\xff"}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("bom", [True, False])
@pytest.mark.parametrize("codec", sorted(BOMS))
def test_a_utf16_or_utf32_log_is_read_as_text(
    tmp_path: Path, codec: str, bom: bool, gz: bool
) -> None:
    data = (BOMS[codec] if bom else b"") + GOOD.read_text(encoding="utf-8").encode(codec)
    path = tmp_path / ("server.log.gz" if gz else "server.log")
    path.write_bytes(gzip.compress(data) if gz else data)
    out = cli(path, out=tmp_path / "r")
    assert out.code in (0, 1), out.stderr
    entry = out.entry(path)
    how = "byte-order mark" if bom else "NUL pattern"
    assert entry["status"] == "ok" and f"read as {codec.upper()} (by its {how})" in entry["notes"]
    (run,) = out.runs_from(path)
    assert (run["record"]["batches"]["graph"], run["record"]["batches"]["eager"]) == GOOD_BATCHES


def test_no_text_behind_a_bom_is_refused_naming_the_encoding(tmp_path: Path) -> None:
    path = tmp_path / "dump.log"
    # control characters in UTF-16-LE (a binary dump behind a BOM); never a NUL code unit,
    # since FF FE 00 00 is the UTF-32-LE BOM, and seeded so the test reads the same bytes each run
    noise = random.Random(32).randbytes(32768)
    path.write_bytes(b"\xff\xfe" + b"".join(bytes([1 + b % 31, 0]) for b in noise))
    out = cli(path, out=tmp_path / "r")
    assert out.code == 2
    assert "binary file, not a text log (read as UTF-16-LE)" in out.stderr


@pytest.mark.parametrize(
    "sample",
    [
        GOOD.read_bytes()[:4096],
        b"\x00" * 4096,
        bytes(range(256)) * 16,
        "日本語テキスト".encode() * 200,
    ],
)
def test_utf8_binary_and_holes_are_not_taken_for_utf16(sample: bytes) -> None:
    assert text_encoding(sample) is None
