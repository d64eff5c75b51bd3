"""Open inputs as bytes and tell what they are.

Compression is recognised by magic bytes, not by name. A truncated gzip yields what
could be decompressed and marks the input partial; a gzip of garbage is refused.
Text is decoded later, per relevant line, with replacement, so invalid UTF-8 never
stops a run.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import io
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from diag.engines import SGLANG, VLLM
from diag.sources.discover import InputFile
from diag.sources.info_sniff import sniff_server_info
from diag.sources.trace_sniff import looks_like_trace

HEAD_BYTES = 256 * 1024
GZIP_MAGIC = b"\x1f\x8b"

_LOG_HEADER = re.compile(
    rb"^(?:\S+\s+)?(?:\([^)]*pid=\d+[^)]*\)\s+)?(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d|"
    rb"(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:)",
    re.M,
)
_TABLE_HEAD = re.compile(rb"^\s*(?:Sorted by [A-Z]+ Time:\s*)?-{8,}(?:\s+-{4,})+\s*$", re.M)


class InputError(Exception):
    """An input that cannot be read at all; the message is the one-line reason."""


@dataclass
class Sniff:
    kind: str  # log | metrics | server_info | profile_table | memory_snapshot | trace | unknown
    backend: str  # vllm | sglang | unknown
    compressed: bool
    reason: str | None = None  # why unknown


def open_binary(item: InputFile) -> BinaryIO:
    """The input's (decompressed) byte stream."""
    if item.fs_path is None:
        stdin = sys.stdin.buffer
        peek = getattr(stdin, "peek", None)
        if peek is not None and peek(2)[:2] == GZIP_MAGIC:
            return gzip.GzipFile(fileobj=stdin, mode="rb")  # type: ignore[return-value]
        return stdin
    raw = open(item.fs_path, "rb")  # noqa: SIM115 - returned to the caller
    magic = raw.read(2)
    raw.seek(0)
    stream: Any = raw
    if magic == GZIP_MAGIC:
        stream = gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        found = text_encoding(stream.peek(_ENCODING_SAMPLE)[:_ENCODING_SAMPLE])
    except (OSError, EOFError, zlib.error):
        found = None  # (a broken gzip: said by the reader that meets it)
    return Transcoded(stream, *found) if found else stream  # type: ignore[return-value]


_ENCODING_SAMPLE = 4096
#: byte-order marks, longest first (UTF-32-LE's begins with UTF-16-LE's)
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def text_encoding(sample: bytes) -> tuple[str, str, int] | None:
    """(codec, how it was told, BOM length) of a UTF-16/32 text, by its byte-order mark or by
    its NUL pattern (ASCII text in UTF-16-LE has a NUL at every odd byte); None for anything
    else (UTF-8, binary, a hole: all NULs, so no position is mostly text)."""
    for bom, codec in _BOMS:
        if sample.startswith(bom) and not _utf8_text(sample[len(bom) :]):
            return codec, "byte-order mark", len(bom)
    for width, codec_le, codec_be in ((4, "utf-32-le", "utf-32-be"), (2, "utf-16-le", "utf-16-be")):
        n = len(sample) - len(sample) % width
        if n < 4 * width:
            continue
        cols = [sample[i:n:width] for i in range(width)]
        nul = [c.count(0) / len(c) for c in cols]
        if nul[0] < 0.1 and all(z > 0.9 for z in nul[1:]):
            return codec_le, "NUL pattern", 0
        if nul[-1] < 0.1 and all(z > 0.9 for z in nul[:-1]):
            return codec_be, "NUL pattern", 0
    return None


def _utf8_text(sample: bytes) -> bool:
    """Bytes after a BOM that read as UTF-8 text (no NUL, under 1 % undecodable): a UTF-8
    log whose first bytes happen to be a BOM (garbage before the first line) stays UTF-8."""
    if 0 in sample:
        return False
    text = sample.decode("utf-8", "replace")
    return text.count("\ufffd") <= len(text) // 100 + 1


class Transcoded(io.RawIOBase):
    """A UTF-16/32 stream read as UTF-8 (undecodable units replaced), so every reader after
    it sees the text a UTF-8 log holds; ``fileobj`` is the file on disk, for progress."""

    def __init__(self, inner: Any, codec: str, how: str, bom: int) -> None:
        self.inner, self.codec, self.how = inner, codec, how
        self.fileobj = getattr(inner, "fileobj", inner)
        self._dec = codecs.getincrementaldecoder(codec)(errors="replace")
        if bom:
            inner.read(bom)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int | None = -1) -> bytes:
        want = BLOCK_BYTES if size is None or size < 0 else max(size, 4)
        while True:
            chunk = self.inner.read(want)
            text = self._dec.decode(chunk, final=not chunk)
            if text or not chunk:
                return text.encode("utf-8", "surrogatepass")

    def close(self) -> None:
        self.inner.close()
        super().close()


def read_head(stream: BinaryIO) -> tuple[bytes, str | None]:
    """Up to HEAD_BYTES of a stream, and the error that cut it short, if any.

    A gzip stream is read with ``read1`` (one decompression step per call): a truncated
    file then raises only on a call that could produce nothing, so everything decompressed
    before the cut is kept (a plain ``read`` would lose it all with the exception).
    """
    if not isinstance(stream, gzip.GzipFile):
        try:
            return stream.read(HEAD_BYTES), None
        except OSError as exc:
            return b"", _gzip_reason(exc)
    chunks: list[bytes] = []
    n = 0
    try:
        while n < HEAD_BYTES:
            chunk = stream.read1(HEAD_BYTES - n)
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        return b"".join(chunks), _gzip_reason(exc)
    return b"".join(chunks), None


def _gzip_reason(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "truncated gzip (compressed stream ends early)"
    if isinstance(exc, gzip.BadGzipFile | zlib.error):
        return f"not a valid gzip file ({exc})"
    return f"read error: {exc}"


def sniff(head: bytes, compressed: bool, backend: bool = True) -> Sniff:
    """What an input is, from its first bytes; ``backend=False``: a log's engine is not
    looked for (``unknown``), for a caller that needs only the kind (counting the engines'
    markers is most of a small log's sniff)."""
    if not head.strip():
        return Sniff("unknown", "unknown", compressed, "empty file")
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return Sniff("memory_snapshot", "unknown", compressed)
    # NUL runs (crash padding, copytruncate holes) say nothing about the rest: judge the text without them
    text = head.replace(b"\x00", b"") if b"\x00" in head else head
    if not text.strip():
        return Sniff("unknown", "unknown", compressed, "no text (only NUL bytes)")
    if _binary_ratio(text[:65536]) > 0.10:
        return Sniff("unknown", "unknown", compressed, "binary file, not a text log")
    head = text
    if looks_like_trace(head):
        return Sniff("trace", "unknown", compressed)
    # a table file names operators ("sglang::...") but has no engine log header lines
    if b"Self CPU" in head and _TABLE_HEAD.search(head) and not _LOG_HEADER.search(head):
        return Sniff("profile_table", "unknown", compressed)
    info = sniff_server_info(head)
    if info is not None:  # GET /server_info saved to a file (diag.parsers.server_info reads it)
        return Sniff("server_info", info, compressed)
    m = _PROMETHEUS.match(head)
    if m:  # a /metrics scrape (curl :30000/metrics > metrics.txt): read by the engine parser
        return Sniff("metrics", m.group(1).decode(), compressed)
    return Sniff("log", detect_backend(head) if backend else "unknown", compressed)


# Prometheus text exposition of an engine's /metrics: the first non-blank line is a HELP or
# TYPE comment or a sample of an engine metric ("sglang:...", "vllm:...")
_PROMETHEUS = re.compile(
    rb"\s*(?:# (?:HELP|TYPE) |)(sglang|vllm):[A-Za-z_][\w:]*(?:\{[^}\n]*\})?[ \t]"
)


def _binary_ratio(sample: bytes) -> float:
    """Share of characters that no text log has: undecodable UTF-8 and C0 controls."""
    if not sample:
        return 0.0
    if sample.isascii():  # the decoded text is the bytes: no replacement, one char a byte
        return (len(sample) - len(sample.translate(None, _CONTROL_BYTES))) / len(sample)
    decoded = sample.decode("utf-8", "replace")
    bad = decoded.count("\ufffd") + len(_CONTROL.findall(decoded))
    return bad / max(len(decoded), 1)


_CONTROL = re.compile("[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x08), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])


#: collector prefixes that carry a name (diag.normalize.prefix peels them): a docker-compose
#: service "svc-1  | " and a "kubectl logs --prefix" pod "[pod/name/container] "
COMPOSE_PREFIX = r"([A-Za-z0-9][\w.-]*(?:-\d+)?)\s+\|\s?"
KUBECTL_PREFIX = r"\[pod/([^\]\s]+)\]\s"
# where such a name stands on a line: after a paste's quote marks and a collector's timestamp
_NAMED = (
    rb"(?:>[ \t]?)*(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s+)?"
    rb"(?:" + COMPOSE_PREFIX.encode() + rb"|" + KUBECTL_PREFIX.encode() + rb")"
)
_NAMED_PREFIX = re.compile(rb"(?m)^" + _NAMED)
# the same at the text's start, and after a newline: a search for "\n" first skips to the
# next line start (``(?m)^`` is tried at every byte: 0.5 ms over a 30 KB pod log)
_NAMED_FIRST = re.compile(_NAMED)
_NAMED_NEXT = re.compile(rb"\n" + _NAMED)


def _may_name(text: bytes) -> bool:
    """Whether ``_NAMED_PREFIX`` can match: a kubectl prefix, or a compose one's blank
    before its bar (tqdm bars hold a "|" in almost every pod log, after a non-blank)."""
    return b"[pod/" in text or (b"|" in text and _BLANK_BAR.search(text) is not None)


_BLANK_BAR = re.compile(rb"\s\|")


def strip_named(text: bytes) -> bytes:
    """``_NAMED_PREFIX.sub(b"", text)``: the named prefixes at line starts removed, each
    match from where the last one ended (``text`` itself when there is none)."""
    if not _may_name(text):
        return text
    parts: list[bytes] = []
    m = _NAMED_FIRST.match(text)
    last = 0 if m is None else m.end()
    while True:
        # a line start at or after ``last`` (its newline may end the last match)
        m = _NAMED_NEXT.search(text, max(last - 1, 0))
        if m is None:
            break
        parts.append(text[last : m.start() + 1])
        last = m.end()
    if last == 0:
        return text
    parts.append(text[last:])
    return b"".join(parts)


def detect_backend(text: bytes) -> str:
    """vllm / sglang / unknown by counting engine-specific markers in the text itself. A
    container's or pod's name ("vllm-server-1  | ") is a hint, counted only when nothing else
    in the text names an engine: an SGLang server may run in a service named after vLLM."""
    bare = strip_named(text)
    s, v = _marker_counts(bare)
    if s == v == 0 and bare is not text:
        s, v = _marker_counts(text)
    if s == v == 0:
        return "unknown"
    return SGLANG.name if s > v else VLLM.name


def _marker_counts(text: bytes) -> tuple[int, int]:
    """SGLang's markers in ``text``, and vLLM's counted only as far as the answer needs:
    up to SGLang's count (at least 1). Which is larger and whether both are 0 come out as
    with both counted whole, and a vLLM log (no SGLang marker) stops at its first marker:
    vLLM's alternation is the slower search (~1 ms over a 30 KB pod log)."""
    s = len(SGLANG.markers.findall(text))
    enough = max(s, 1)
    v = 0
    for _ in VLLM.markers.finditer(text):
        v += 1
        if v >= enough:
            break
    return s, v


BLOCK_BYTES = 8 * 1024 * 1024
# compressed inputs are read with read1 (one decompression step per call, nothing lost at a
# truncated end) in steps of at most this size, gathered into BLOCK_BYTES blocks
GZIP_BLOCK_BYTES = 256 * 1024


class Hole(bytes):
    """An empty block standing for ``skipped`` NUL bytes that were jumped over, not read (a
    sparse file's hole, which ``copytruncate`` rotation leaves): readers that count NULs
    (``diag.ingest.inputs.NulCount``) add it, every other reader sees an empty block."""

    skipped: int = 0


def _hole(n: int) -> Hole:
    h = Hole()
    h.skipped = n
    return h


def _all_nul(block: bytes) -> bool:
    return block.count(0) == len(block)


def data_from(stream: Any, pos: int) -> int:
    """The offset of the first byte of data at or after ``pos`` in a plain file, where the
    file system says (``SEEK_DATA``; the file's end for a trailing hole); else ``pos``."""
    try:
        fd = stream.fileno()
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no data after pos: a hole to the end
            try:
                return max(pos, os.fstat(fd).st_size)
            except OSError:
                return pos
        return pos
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return pos


def skip_nul_head(stream: BinaryIO, head: bytes) -> tuple[bytes, int, str | None]:
    """A head that is only NUL bytes (a log that starts with a hole) is jumped over: the next
    head from the first byte of text, and how many NUL bytes came before it (in constant
    memory, holes skipped without reading where the file system says where they end)."""
    skipped, err = 0, None
    while head and _all_nul(head):
        skipped += len(head)
        if not isinstance(stream, gzip.GzipFile):
            pos = stream.tell()
            nxt = data_from(stream, pos)
            if nxt > pos:
                stream.seek(nxt)
                skipped += nxt - pos
        head, err = read_head(stream)
    lead = len(head) - len(head.lstrip(b"\x00"))
    return head[lead:], skipped + lead, err


def iter_blocks(
    stream: BinaryIO, head: bytes, errors: list[str], size: int | None = None
) -> Iterator[bytes]:
    """The stream as byte blocks cut anywhere (head first), stopping cleanly on a broken gzip.

    The scanner finds candidate lines with one regex over each block, so big blocks are
    what makes skipping irrelevant lines nearly free.
    """
    gz = isinstance(stream, gzip.GzipFile)
    if size is None:
        size = BLOCK_BYTES
    plain = not gz and hasattr(stream, "seekable") and stream.seekable()
    if head:
        yield head
    if gz:  # decompressed steps gathered into blocks of the plain file's size (one answer)
        yield from _gzip_blocks(stream, size, errors)
        return
    while True:
        try:
            block = stream.read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            errors.append(_gzip_reason(exc))
            return
        if not block:
            return
        yield block
        if plain and block[-1] == 0:  # ends inside a hole: jump to its end where it is known
            pos = stream.tell()
            nxt = data_from(stream, pos)
            if nxt > pos:
                stream.seek(nxt)
                yield _hole(nxt - pos)


def _gzip_blocks(stream: Any, size: int, errors: list[str]) -> Iterator[bytes]:
    """A gzip stream's bytes in blocks of ``size``, read with ``read1`` (see
    :func:`read_head`): a truncated stream yields everything decompressed before the cut.
    Blocks of the plain file's size let the bulk path see compressed input as it sees the
    plain copy (256 KiB steps never reached its minimum region)."""
    chunks: list[bytes] = []
    n = 0
    while True:
        try:
            chunk = stream.read1(GZIP_BLOCK_BYTES)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            if chunks:
                yield b"".join(chunks)
            errors.append(_gzip_reason(exc))
            return
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
        if n >= size:
            yield b"".join(chunks)
            chunks, n = [], 0
    if chunks:
        yield b"".join(chunks)


def iter_range(
    path: str | bytes, start: int, end: int | None, size: int = BLOCK_BYTES
) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of a plain file (to its end when ``end`` is None) as blocks."""
    with open(path, "rb") as fh:
        fh.seek(start)
        pos = start
        while end is None or pos < end:
            want = size if end is None else min(size, end - pos)
            block = fh.read(want)
            if not block:
                return
            pos += len(block)
            yield block
            if block[-1] == 0:  # ends inside a hole: jump to its end where it is known
                nxt = data_from(fh, pos) if end is None else min(data_from(fh, pos), end)
                if nxt > pos:
                    fh.seek(nxt)
                    yield _hole(nxt - pos)
                    pos = nxt


#: (line number, byte offset) of a line start in a plain file, as its reading found it
LineAnchor = tuple[int, int]


def lines_at(
    stream: BinaryIO,
    head: bytes,
    wanted: set[int],
    errors: list[str],
    size: int | None = None,
    count: Callable[[bytes], int] | None = None,
    lineno: int = 1,
) -> dict[int, bytes]:
    """The physical lines (1-based numbers, newline kept) in ``wanted``, as ``iter_lines``
    would number them, reading blocks and only counting newlines in blocks that hold none
    of them: ~10x faster than enumerating ``iter_lines`` to the last wanted line.
    ``count``: a faster newline counter than numpy's, where a caller has one (the C one of
    the hot path, which lives above this layer). ``lineno``: the number of the line the
    stream is at (a caller that seeked to a known line start); lines before it are not read."""
    count = count or _newlines
    out: dict[int, bytes] = {}
    wanted = {n for n in wanted if n >= lineno}
    if not wanted:
        return out
    todo = sorted(wanted)
    last = todo[-1]
    # ``lineno``: number of the line that starts at the beginning of the next block
    carry = b""
    i = 0
    for block in iter_blocks(stream, head, errors, size):
        n = count(block)
        if n == 0:
            carry += block
            continue
        end = block.rfind(b"\n") + 1
        if todo[i] < lineno + n:  # some wanted line ends in this block: only then find them
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 0x0A)
            while i < len(todo) and todo[i] < lineno + n:
                j = todo[i] - lineno  # the j-th line ending in this block (carry before the 0th)
                if j >= 0:
                    text = block[int(ends[j - 1]) + 1 if j else 0 : int(ends[j]) + 1]
                    out[todo[i]] = carry + text if j == 0 else text
                i += 1
        lineno += n
        carry = block[end:]
        if i >= len(todo) or lineno > last:
            return out
    if carry and i < len(todo) and todo[i] == lineno:
        out[lineno] = carry
    return out


def _newlines(block: bytes) -> int:
    """``block.count(b"\\n")``, by a vectorised compare (~3x faster on 8 MiB blocks)."""
    return int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 0x0A))


def raw_position(stream: BinaryIO) -> int | None:
    """How far into the file on disk a (possibly gzip) stream has read, for progress."""
    raw = getattr(stream, "fileobj", stream)
    try:
        return int(raw.tell())
    except (OSError, ValueError, AttributeError):
        return None


def iter_lines(stream: BinaryIO, head: bytes, errors: list[str]) -> Iterator[bytes]:
    """Physical lines of a stream (head already read), stopping cleanly on a broken gzip."""
    buffered = io.BufferedReader(_Chain(head, stream), buffer_size=1 << 20)
    while True:
        try:
            line = buffered.readline()
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            errors.append(_gzip_reason(exc))
            return
        if not line:
            return
        yield line


class _Chain(io.RawIOBase):
    """Head bytes followed by the rest of a stream, as one raw stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        n = len(data)
        b[:n] = data
        return n
