"""Physical line -> logical lines: tqdm redraws split apart, ANSI escapes removed.

A tqdm bar written to a file keeps every refresh on one physical line separated by
carriage returns, and the next log line is often glued right after the last refresh
(no newline after ``\\r``). Renderers that drop the ``\\r`` leave the refreshes
concatenated. Both are split here, before any prefix or message parser runs.
"""

from __future__ import annotations

import html
import re

from diag.normalize.prefix import wrapper_prefix

# Raw ANSI CSI sequences and their caret-notation copies ("^[[0;36m") as pasted from
# terminals; plus stray caret control characters such as "^M" / "^O".
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\^\[\[[0-9;?]*[A-Za-z]")
_CARET_CTRL = re.compile(r"\^[@A-Z\\\]^_](?=[^a-z]|$)")
_OTHER_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# the character references a web page's source shows a log's text with (GitHub writes &#39;,
# Python's html.escape &#x27;, MarkupSafe &#34;, editors &nbsp; &rsquo;): a paste copied from
# page source is read as the log it shows. Only references closed by ';' are decoded (each by
# the stdlib's html.unescape, so its full HTML5 table): the legacy forms without ';' that
# html.unescape also takes ("&para", "&copy") are ordinary text in a log ("?a=1&para=2").
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# literals one of which every decodable reference holds (the scanner's raw-line prefilter)
ENTITY_ANCHORS = ("&#", "&quot;", "&apos;", "&lt;", "&gt;", "&amp;", "&nbsp;")

# The tail of a tqdm refresh: "[00:01<00:03,  1.14s/it]" or "[00:00<?, ?it/s]". Text glued
# after it starts a new logical line.
_TQDM_TAIL = re.compile(r"\[(?:\d+:)?\d\d:\d\d<(?:(?:\d+:)?\d\d:\d\d|\?)(?:,\s*[^\]\n]*)?\]")


def clean(text: str) -> str:
    """Remove ANSI/caret escapes and control characters (tabs kept); decode HTML entities."""
    if "\x1b" in text or "^" in text:
        text = _ANSI.sub("", text)
        if "^" in text:
            text = _CARET_CTRL.sub("", text)
    if "&" in text:
        text = decode_entities(text)
    if _OTHER_CTRL.search(text):
        text = _OTHER_CTRL.sub("", text)
    return text


def decode_entities(text: str) -> str:
    """HTML character references closed by ';' decoded, once; a bare '&' stays text."""
    return _ENTITY.sub(lambda m: html.unescape(m.group()), text)


def split_logical(physical: str) -> list[str]:
    """Split one physical line into its logical lines (CR redraws, glued tqdm tails).

    A collector prefix (docker timestamp, ``svc-1  | ``, ``[pod/x]``) stands once at the
    start of the physical line; it is copied to the logical lines after the first so
    they keep its timestamp and, in a compose log of several servers, their server.
    """
    parts = physical.split("\r") if "\r" in physical else [physical]
    out: list[str] = []
    for part in parts:
        part = clean(part)
        if "<" in part and "]" in part:
            out.extend(_split_tqdm(part))
        elif part.strip():
            out.append(part)
    if len(out) > 1:
        head = wrapper_prefix(out[0])
        if head:
            out[1:] = [_with_prefix(head, p) for p in out[1:]]
    return out


def _with_prefix(head: str, part: str) -> str:
    """``head + part`` when peel strips exactly ``head`` from it again, else ``part``."""
    if part.startswith(head):
        return part
    joined = head + part
    return joined if wrapper_prefix(joined) == head else part


def _split_tqdm(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for m in _TQDM_TAIL.finditer(text):
        end = m.end()
        rest = text[end:]
        if rest.strip():
            pieces.append(text[start:end])
            start = end
    tail = text[start:]
    if tail.strip():
        pieces.append(tail)
    return [p for p in pieces if p.strip()]
