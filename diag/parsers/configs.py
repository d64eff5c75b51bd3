"""Configuration echoes (SGLang ServerArgs, vLLM engine config / CLI args) via lark.

The ``pyrepr.lark`` grammar reads Python reprs and JSON alike; a line that was cut off
or carries something the grammar does not know falls back to a regex scan of
``key=value`` pairs, so a damaged line still yields the keys it shows.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
import warnings
from functools import lru_cache
from typing import Any

from lark import Lark, Transformer, UnexpectedInput, v_args
from lark.exceptions import VisitError

from diag.parsers.base import parse_int_list
from diag.resources import grammar_text


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_text("pyrepr.lark"), parser="lalr", maybe_placeholders=False)


_CONSTS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


@v_args(inline=True)
class _ToPython(Transformer):
    def string(self, *parts: Any) -> str:
        out = []
        for p in parts:
            s = str(p)
            if (
                "\\" not in s
                and len(s) >= 2
                and s[0] == s[-1]
                and s[0] in "'\""
                and s[:3] not in ("'''", '"""')
            ):
                out.append(s[1:-1])  # the common case, no escapes: what literal_eval would give
                continue
            try:
                with (
                    warnings.catch_warnings()
                ):  # "\s" in a logged regex: invalid escape, still a string
                    warnings.simplefilter("ignore")
                    out.append(ast.literal_eval(s.lstrip("fF")))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                out.append(s[1:-1])
        return "".join(str(x) for x in out)

    def number(self, tok: Any) -> float | int:
        s = str(tok).replace("_", "")
        try:
            return int(s)
        except ValueError:
            return float(s)

    def dotted(self, *names: Any) -> Any:
        text = ".".join(str(n) for n in names)
        return _CONSTS.get(text, text)

    def ellipsis(self, _tok: Any = None) -> str:
        return "..."

    def list(self, *items: Any) -> builtins.list[Any]:
        return builtins.list(items)

    def tuple(self, *items: Any) -> builtins.tuple[Any, ...]:
        return tuple(items)

    def set(self, *items: Any) -> builtins.list[Any]:
        return list(items)

    def pair(self, k: Any, v: Any) -> builtins.tuple[Any, Any]:
        return (k, v)

    def dict(self, *pairs: Any) -> builtins.dict[Any, Any]:
        return {(k if isinstance(k, str | int | float) else str(k)): v for k, v in pairs}

    def enum(self, name: Any, value: Any) -> str:
        # <CUDAGraphMode.PIECEWISE: 1> -> "PIECEWISE"
        return str(name).rsplit(".", 1)[-1]

    def kwarg(self, name: Any, value: Any = None) -> builtins.tuple[str, Any]:
        return (str(name), value)

    def kwargs(self, *kws: Any) -> builtins.dict[str, Any]:
        return dict(kws)

    def call(self, name: Any, *args: Any) -> builtins.dict[str, Any]:
        out: builtins.dict[str, Any] = {"__call__": str(name)}
        for i, a in enumerate(args):
            if (
                isinstance(a, tuple)
                and len(a) == 2
                and isinstance(a[0], str)
                and a[0].isidentifier()
            ):
                out[a[0]] = a[1]
            else:
                out[f"_{i}"] = a
        return out


# Real configs nest a few levels; the tree transformer recurses once per level, so a
# damaged or hostile line with thousands of brackets would otherwise hit RecursionError.
MAX_NESTING = 64
_BRACKETS = re.compile(r"[\[\](){}]")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def _too_deep(text: str) -> bool:
    depth = 0
    for m in _BRACKETS.finditer(_QUOTED.sub("", text)):
        depth += 1 if m.group() in "([{" else -1
        if depth > MAX_NESTING:
            return True
    return False


def open_brackets(text: str) -> int:
    """How many brackets the text leaves open (quoted text aside): > 0 for an echo that was
    hard-wrapped or cut before its end."""
    depth = 0
    for m in _BRACKETS.finditer(_QUOTED.sub("", text)):
        depth = depth + 1 if m.group() in "([{" else max(0, depth - 1)
    return depth


_FIRST_KEY = re.compile(r"(?:^|,\s*)([A-Za-z_]\w*)=(?!=)")


def echo_from_first_key(text: str) -> str | None:
    """An echo cut at its start ("...wen3-8B', speculative_config=None, ..."): the text from
    its first whole ``key=`` on (the cut value before it says nothing)."""
    m = _FIRST_KEY.search(text)
    return text[m.start(1) :] if m else None


#: a quoted key of vLLM's CompilationConfig printed as a dict (``compilation_config={...}``)
#: whose name says graph capture: inside that dict, these names are the graph settings alone
_GRAPH_DICT_KEY = re.compile(r"['\"](\w*(?:cudagraph|cuda_graph|capture)\w*)['\"]\s*:")


def graph_dict_fragment(text: str) -> dict[str, Any]:
    """The graph settings of a ``compilation_config={...}`` dict whose start was cut off (a
    hard-wrapped or clipped echo: ``... 'cudagraph_mode': <CUDAGraphMode.FULL: 2>, ...``):
    each quoted graph key the text shows with its value; {} when it shows none. Values cut by
    the end of the line keep what they show (a size list's numbers)."""
    if _GRAPH_DICT_KEY.search(text) is None:
        return {}
    return {k: v for k, v in _scan_pairs(text).items() if _GRAPH_DICT_KEY.match(f"'{k}':")}


def parse_value(text: str) -> Any:
    """Parse a Python-repr/JSON value or ``k=v, ...`` list; raises ValueError if it cannot.

    A text read before gives a copy of its value (the pods of one deployment echo the same
    config line: one parse, ~0.7 ms for a short ServerArgs line, ~20x a copy)."""
    if _too_deep(text):
        raise ValueError(f"not a config repr: nested deeper than {MAX_NESTING} levels")
    text = text.strip()
    if len(text) > _KEPT_TEXT:
        return _parse(text)
    return copy.deepcopy(_parsed(text))


def _parse(text: str) -> Any:
    try:
        tree = _parser().parse(text)
        return _ToPython().transform(tree)
    except UnexpectedInput as exc:
        raise ValueError(f"not a config repr: {exc.__class__.__name__}") from None
    except VisitError as exc:  # a value the transformer cannot convert
        raise ValueError(f"not a config repr: {exc.orig_exc.__class__.__name__}") from None
    except RecursionError:  # brackets inside strings escape the depth check above
        raise ValueError("not a config repr: nested too deeply") from None


#: :func:`parse_value`'s values of the texts read last, shared (callers get copies: they may
#: change theirs); a text that does not parse raises each time (not kept), a longer one than
#: :data:`_KEPT_TEXT` is not kept (a damaged multi-MB line)
_parsed = lru_cache(maxsize=64)(_parse)
_KEPT_TEXT = 1 << 16


_KV = re.compile(
    r"(?:^|[\s,({])['\"]?(\w+)['\"]?\s*[=:]\s*('[^']*'|\"[^\"]*\"|\[[^\]]*(?:\]|$)|<[^>]*>|[^,()\[\]{}]+)"
)


def parse_kwargs(text: str) -> dict[str, Any]:
    """``a=1, b='x', c={...}`` (or ``Name(a=1, ...)``) -> dict; best effort when damaged."""
    text = text.strip()
    try:
        value = parse_value(text)
        if isinstance(value, dict):
            value.pop("__call__", None)
            return value
    except ValueError:
        pass
    return _scan_pairs(text)


def _scan_pairs(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in _KV.finditer(text):
        key, raw = m.group(1), m.group(2).strip()
        if key in out:
            continue
        try:
            out[key] = parse_value(raw)
        except ValueError:
            # a list cut off by the end of the line keeps the numbers it shows
            out[key] = [int(x) for x in re.findall(r"-?\d+", raw)] if raw.startswith("[") else raw
    return out


# ---------------------------------------------------------------- config echoes
def parse_config_echo(text: str) -> dict[str, Any]:
    """``model='x', served_model_name=a/b, compilation_config={...}, ...`` -> dict.

    Split at top-level commas first and parse each value on its own: unquoted values such
    as ``served_model_name=Qwen/Qwen3-0.6B`` defeat a whole-line parse, and a line cut off
    inside ``compilation_config`` must still yield the settings before the cut.
    """
    out: dict[str, Any] = {}
    for key, raw in _split_top(text):
        raw = raw.strip()
        if not raw:
            out[key] = None
            continue
        try:
            out[key] = parse_value(raw)
        except ValueError:
            if raw.startswith("{"):
                out[key] = parse_dict(raw)
            elif raw.startswith("["):
                out[key] = parse_int_list(raw) or []
            else:
                out[key] = raw
    return out


_KEY_START = re.compile(r"\s*([A-Za-z_]\w*)=(?!=)")


def _split_top(text: str) -> list[tuple[str, str]]:
    """Top-level ``key=value`` pieces; commas inside brackets or quotes do not split."""
    pieces: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"" and (i == 0 or not text[i - 1].isalnum()):
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    out: list[tuple[str, str]] = []
    for piece in pieces:
        m = _KEY_START.match(piece)
        if m:
            out.append((m.group(1), piece[m.end() :]))
        elif out and piece.strip():
            out[-1] = (out[-1][0], out[-1][1] + "," + piece)
    return out


def parse_dict(text: str) -> dict[str, Any]:
    try:
        value = parse_value(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        value.pop("__call__", None)
        return value
    return parse_kwargs(text.strip().lstrip("{").rstrip("}"))
