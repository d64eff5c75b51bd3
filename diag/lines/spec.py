"""How a periodic line is declared (``LineSpec``) and what is derived from it; the
declarations themselves are in ``diag.lines.periodic``.

A declaration is the message of one line shape (the header is the engine's, see
``diag.normalize.prefix``): literals, typed fields, optional groups, alternatives and the
tail tolerance. Everything that reads the line is derived from it:

* ``LineSpec.regex("python")``: the per-line matcher of the parsers (``SGLangParser``'s
  decode and prefill fast paths, ``VLLMParser``'s stats and step lines), read with ``read``;
  a free-text line's searched fields (``Find``) per line: ``search_fields``;
* ``LineSpec.regex("re2")``: the RE2 pattern of the hot path (``diag.ingest.hotpath.kinds``),
  with ``finds`` its leftmost-search fields (RE2 has no lookahead);
* ``LineSpec.program()``: the op table the C scanner interprets (``_cscan_prog.c``).

Rewording a line or adding a field is one edit in ``periodic`` (a new column also needs its event
kind in ``diag.events``). Shapes (``shared/formats``): SGLang decode D4, D5, D7, D9-D18 and
prefill P5, P9-P13 (``scheduler_metrics_mixin.py``), SGLang ``--log-requests`` lines
(``tokenizer_manager.py``), vLLM V1 stats (``v1/metrics/loggers.py``), ``Added request``
(``v1/engine/async_llm.py``), ``Received request`` (``entrypoints/serve/utils/
request_logger.py``), the DEBUG step line of 0.11 (``v1/worker/gpu_model_runner.py``) and
the ``--cudagraph-metrics`` table row (``compilation/cuda_graph.py``; ``cells``: read in
bulk only where its block asks).

Template syntax of the literal parts: ``{name:type}`` a field (``_`` reads it without
keeping it), ``{a|b|c}`` one of the literals; ``Opt``/``Alt`` group items. A group decides by
its leading literals (or its first field): once they matched, the rest must too, else the
line is rejected in bulk (the per-line parsers then read it): the C form accepts a subset of
what the regexes accept, never a different reading.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

#: the most digits an int field holds: numbers are kept in float64 columns, exact to 2**53;
#: a value of more digits is dropped with an input note (the bulk scanners accept no more)
INT_DIGITS = 15
#: the most digits a number's text is converted from (Python refuses more than 4300); a longer
#: one stands as 10**TEXT_DIGITS, past every limit, and is dropped like any other
TEXT_DIGITS = 4000


def digits_int(t: str) -> int:
    """The exact int of an (optionally signed) ASCII digit text. More than ``TEXT_DIGITS``
    digits give 10**TEXT_DIGITS (signed): past every field's range, so the sink drops it
    with an input note (``events.FIELD_LIMITS``); Python refuses to convert such texts."""
    neg = t[:1] == "-"
    if len(t) - neg > TEXT_DIGITS:
        return -(10**TEXT_DIGITS) if neg else 10**TEXT_DIGITS
    return int(t)


FieldType = Literal["int", "unum", "num", "bool", "upper", "quoted", "id", "dotid"]
Flavor = Literal["python", "re2"]

#: each field type's text, the same in both regex flavours (ASCII digits only)
_TYPE_RX: dict[FieldType, str] = {
    "int": "[0-9]{1," + str(INT_DIGITS) + "}",
    "unum": r"[0-9]+(?:\.[0-9]+)?",
    "num": r"-?[0-9]+(?:\.[0-9]+)?",
    "bool": "True|False",
    "upper": "[A-Z_]+",
    # the text of a single-quoted Python repr string (``rid='...'``), up to its quote
    "quoted": "[^']+",
    # a request id as vLLM's "Added request %s." prints it (ASCII word bytes and "-")
    "id": r"[A-Za-z0-9_\-]{1,256}",
    # a request id as vLLM's "Received request %s: " prints it (dots too: the id is not at
    # the end of a sentence there)
    "dotid": r"[A-Za-z0-9_.\-]{1,256}",
}
#: the field types that read text (the C row has one text span: ``Row.str``)
TEXT_TYPES: tuple[FieldType, ...] = ("upper", "quoted", "id", "dotid")
#: an int searched in free text (``Find``): every digit of the run, as the per-line
#: ``re.search`` reads it; past INT_DIGITS the bulk paths leave the line per line
_FIND_INT = "[0-9]+"


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class OneOf:
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Field:
    name: str | None  # None: read, not kept
    type: FieldType


@dataclass(frozen=True)
class Opt:
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Alt:
    branches: tuple[tuple[Item, ...], ...]


@dataclass(frozen=True)
class Find:
    """A field searched ahead in free text (a request repr): the leftmost place from here
    where ``items`` match, as ``re.search`` finds it (a failed try, e.g. an empty
    ``rid=''``, is retried further on); the position does not move. ``required``: a line
    without it stays per line (where the field reads as missing)."""

    items: tuple[Item, ...]
    required: bool = False


@dataclass(frozen=True)
class Skip:
    """Inside a ``Find``: any text, as little as what follows needs (``.*?``), and a literal
    follows (after ``Bound``s): vLLM's ``max_tokens=`` is searched after ``SamplingParams(``."""


@dataclass(frozen=True)
class Bound:
    """Inside a ``Find``, after its literal: an ASCII word boundary (``\\b``), so that a
    searched ``max_tokens=`` is not the end of another word."""


@dataclass(frozen=True)
class Pad:
    """Blanks, any number (``[ \\t]*``): a table cell's padding."""


@dataclass(frozen=True)
class Tail:
    """The end of the line: trailing blanks, CR, LF, the end; ``comma``: a trailing ","
    may precede them (SGLang prints ", " after its last field; collectors strip the blank).
    ``text``: free text up to the end instead (a request repr), read in bulk only as far as
    plain: no byte the normaliser treats (a control byte but tab, DEL, ``^``, a ``<`` right
    after a digit: ``normalize.lines._TQDM_TAIL`` needs ``dd:dd<``)."""

    comma: bool = False
    text: bool = False


Item = Lit | OneOf | Field | Opt | Alt | Find | Skip | Bound | Pad | Tail

_TOKEN = re.compile(r"\{([^{}]*)\}")


def seq(*parts: str | Item) -> tuple[Item, ...]:
    """Items from template strings (``{name:type}``, ``{a|b}``) and group objects."""
    out: list[Item] = []
    for part in parts:
        if not isinstance(part, str):
            out.append(part)
            continue
        pos = 0
        for m in _TOKEN.finditer(part):
            if m.start() > pos:
                out.append(Lit(part[pos : m.start()]))
            body = m.group(1)
            if ":" in body:
                name, typ = body.split(":")
                if typ not in _TYPE_RX:
                    raise ValueError(f"unknown field type {typ!r} in {part!r}")
                out.append(Field(None if name == "_" else name, typ))
            else:
                out.append(OneOf(tuple(body.split("|"))))
            pos = m.end()
        if pos < len(part):
            out.append(Lit(part[pos:]))
    return tuple(out)


def _commit(items: tuple[Item, ...]) -> int:
    """How many leading items decide a group: its run of literals, at least one item."""
    n = 0
    for it in items:
        if not isinstance(it, (Lit, OneOf)):
            break
        n += 1
    return max(n, 1)


@dataclass(frozen=True)
class LineSpec:
    """One periodic line: its kind tag, engine (header), event table and message items."""

    name: str  # e.g. "sglang.decode"
    engine: Literal["sglang", "vllm"]
    table: str
    items: tuple[Item, ...]
    #: fields of the event kind this shape never prints (they read as missing)
    absent: tuple[str, ...] = ()
    #: constant columns the shape implies (a request line's action)
    consts: tuple[tuple[str, str], ...] = ()
    #: a field may hold any word (a request id): like free text, the line is read in bulk
    #: only without other parsers' triggers
    triggers: bool = False
    #: a table row's cell separator: the row means something only inside its table's block,
    #: whose header row decides which cell is which field (``cell_order``), so it is read in
    #: bulk only there (the walk asks for it: ``diag.ingest.hotpath.scanner``), never located
    cells: str = ""
    _groups: dict[str, list[str]] = field(default_factory=dict, compare=False, repr=False)

    def __hash__(self) -> int:
        """The hash dataclass would give (of the compared fields), made once: the cached
        readers below hash their spec on every line read, and the nested items' hash cost
        ~1 ms a small pod log."""
        got: int | None = self.__dict__.get("_hash")
        if got is None:
            got = hash(
                (self.name, self.engine, self.table, self.items, self.absent, self.consts)
                + (self.triggers, self.cells)
            )
            object.__setattr__(self, "_hash", got)
        return got

    def __post_init__(self) -> None:
        if not self.items or not isinstance(self.items[-1], Tail):
            raise ValueError(f"{self.name}: a line ends with its Tail")
        for it in self._walk(self.items):
            if isinstance(it, (Opt, Alt)):
                for body in it.branches if isinstance(it, Alt) else (it.items,):
                    if not body or isinstance(body[0], (Opt, Tail)):
                        raise ValueError(f"{self.name}: a group must start with what decides it")
                    if any(isinstance(x, Find) for x in body):
                        raise ValueError(f"{self.name}: a Find stands outside groups")
            if isinstance(it, Find):
                kept = [x for x in self._walk(it.items) if isinstance(x, Field) and x.name]
                if not it.items or not isinstance(it.items[0], Lit) or len(kept) != 1:
                    raise ValueError(f"{self.name}: a Find is a literal, then one kept field")
                if any(isinstance(x, (Find, Tail, Opt, Alt)) for x in it.items):
                    raise ValueError(f"{self.name}: a Find holds literals and fields only")
                for k, x in enumerate(it.items):
                    after = [y for y in it.items[k + 1 :] if not isinstance(y, Bound)]
                    if isinstance(x, Skip) and not (after and isinstance(after[0], Lit)):
                        raise ValueError(f"{self.name}: a Skip is followed by a literal")
        every = [x for x in self._walk(self.items) if isinstance(x, (Skip, Bound))]
        in_finds = [x for f in self.items if isinstance(f, Find) for x in self._walk(f.items)]
        if len(every) != sum(isinstance(x, (Skip, Bound)) for x in in_finds):
            raise ValueError(f"{self.name}: Skip and Bound stand inside a Find")
        if sum(t in TEXT_TYPES for _, t in self.fields()) > 1:
            raise ValueError(f"{self.name}: one text field at most (the C row has one)")

    @staticmethod
    def _walk(items: tuple[Item, ...]) -> Iterator[Item]:
        for it in items:
            yield it
            if isinstance(it, (Opt, Find)):
                yield from LineSpec._walk(it.items)
            elif isinstance(it, Alt):
                for b in it.branches:
                    yield from LineSpec._walk(b)

    # ------------------------------------------------------------ what it holds
    @functools.cache  # noqa: B019 - specs are module constants; read per block of every scan
    def fields(self) -> tuple[tuple[str, FieldType], ...]:
        """The kept fields, first-seen order, each once (an Alt may place one twice)."""
        seen: dict[str, FieldType] = {}
        for it in self._walk(self.items):
            if isinstance(it, Field) and it.name is not None:
                if seen.setdefault(it.name, it.type) != it.type:
                    raise ValueError(f"{self.name}: field {it.name} with two types")
        return tuple(seen.items())

    @property
    def literal(self) -> bytes:
        """The first literal every such line holds (a prefilter and the kind's mark)."""
        for it in self.items:
            if isinstance(it, Lit):
                return it.text.encode()
        raise ValueError(f"{self.name}: no literal")

    def cell_order(self) -> dict[str, int]:
        """A table row's kept fields by cell (0 = the first cell after the leading
        separator): the order a header row must give for the row to be read so."""
        out: dict[str, int] = {}
        seps = 0
        for it in self._walk(self.items):
            if isinstance(it, Lit):
                seps += it.text.count(self.cells)
            elif isinstance(it, Field) and it.name is not None:
                out[it.name] = seps - 1
        return out

    def heads(self) -> tuple[bytes, ...]:
        """The first 4 bytes a message of this shape can start with (the C locator; a table
        row has none: the block reads it)."""
        if self.cells:
            return ()
        out: list[bytes] = []
        for start in _starts(self.items):
            if len(start) < 4:
                raise ValueError(f"{self.name}: a start shorter than 4 bytes: {start!r}")
            if start[:4] not in out:
                out.append(start[:4])
        return tuple(out)

    # ------------------------------------------------------------ regexes
    def regex(self, flavor: Flavor, tail: bool = True) -> str:
        """The message (after the header) as a regex with a named group per field (a field
        placed twice gets ``name__2``): ``python`` for the per-line parsers (``re.ASCII``,
        ``match`` on ``line.msg``), ``re2`` for the hot path (after the header pattern);
        ``tail=False``: up to the Tail (a free-text line's capture prefix)."""
        names: dict[str, int] = {}
        return "".join(_rx(it, flavor, names) for it in self.items[: None if tail else -1])

    def groups(self) -> dict[str, list[str]]:
        """Field name -> its group names in ``regex`` (one per placement)."""
        if not self._groups:
            for name, _ in self.fields():
                self._groups[name] = []
            names: dict[str, int] = {}
            pattern = re.compile("".join(_rx(it, "python", names) for it in self.items))
            for g in pattern.groupindex:
                self._groups[g.split("__")[0]].append(g)
        return self._groups

    def read(self, m: re.Match[str]) -> dict[str, Any]:
        """A per-line match of ``regex("python")`` as the event's field values."""
        out: dict[str, Any] = dict.fromkeys(self.absent)
        out.update(self.consts)
        get = m.group
        for name, typ, groups in self._plan():
            text = get(groups[0])
            if text is None and len(groups) > 1:
                text = next((t for t in map(get, groups[1:]) if t), None)
            out[name] = None if text is None else _convert(typ, text)
        return out

    def search_fields(self, msg: str) -> dict[str, Any]:
        """The event's field values of a free-text line from its ``Find`` fields, each
        searched in the message (``re.search``), as the per-line parsers read it."""
        out: dict[str, Any] = dict.fromkeys(self.absent)
        out.update(self.consts)
        for name, typ, rx in self._searches():
            m = rx.search(msg)
            out[name] = None if m is None else _convert(typ, m.group(name))
        return out

    def search_labelled(self, msg: str) -> dict[str, Any]:
        """The event's field values of a line of this kind that is not of the declared
        shape (cut, reordered, merged with another print), each field searched by the words
        the line prints before it: what the per-line path falls back on."""
        out: dict[str, Any] = dict.fromkeys(self.absent)
        out.update(self.consts)
        for name, typ, rx in self._labelled():
            m = rx.search(msg)
            out[name] = None if m is None else _convert(typ, m.group(name))
        return out

    @functools.cache  # noqa: B019 - specs are module constants
    def _labelled(self) -> tuple[tuple[str, FieldType, re.Pattern[str]], ...]:
        """Each kept field with its label: the literals before it in its sequence, back to
        the previous ", " ("Running: " for ``running``, "Waiting|Pending: " for ``waiting``)."""
        out: list[tuple[str, FieldType, re.Pattern[str]]] = []

        def walk(items: tuple[Item, ...]) -> None:
            for k, it in enumerate(items):
                if isinstance(it, (Opt, Find)):
                    walk(it.items)
                elif isinstance(it, Alt):
                    for branch in it.branches:
                        walk(branch)
                elif isinstance(it, Field) and it.name is not None:
                    label: list[str] = []
                    for before in reversed(items[:k]):
                        if isinstance(before, OneOf):
                            label.insert(0, _rx(before, "python", {}))
                            continue
                        if not isinstance(before, Lit):
                            break
                        head, sep, tail = before.text.rpartition(", ")
                        label.insert(0, _esc(tail if sep else before.text))
                        if sep:
                            break
                    if label:
                        body = "".join(label) + _rx(it, "python", {}, True)
                        out.append((it.name, it.type, re.compile(body, re.ASCII)))

        walk(self.items)
        return tuple(out)

    @functools.cache  # noqa: B019 - specs are module constants
    def _searches(self) -> tuple[tuple[str, FieldType, re.Pattern[str]], ...]:
        out = []
        for it in self.items:
            if isinstance(it, Find):
                (name, typ), body = _kept(it), "".join(_rx(x, "python", {}, True) for x in it.items)
                out.append((name, typ, re.compile(body, re.ASCII)))
        return tuple(out)

    def finds(self) -> tuple[tuple[str, FieldType, bool, str], ...]:
        """The ``Find`` fields as leftmost searches for RE2 (no lookahead there): (name,
        type, required, the message up to the search, nothing captured, then ``.*?`` and
        the search with its field's group)."""
        out = []
        for k, it in enumerate(self.items):
            if isinstance(it, Find):
                before = "".join(_rx(x, "re2", {}) for x in self.items[:k])
                before = re.sub(r"\(\?P<\w+>", "(?:", before)
                body = "".join(_rx(x, "re2", {}, True) for x in it.items)
                out.append((*_kept(it), it.required, before + ".*?" + body))
        return tuple(out)

    @property
    def searched(self) -> bool:
        """The line ends in free text (a request repr) with fields searched in it."""
        tail = self.items[-1]
        return isinstance(tail, Tail) and tail.text

    @property
    def free_text(self) -> bool:
        """Other parsers' triggers may hide in the line (free text, an id), so it is read in
        bulk only without them (``Kind.with_triggers``)."""
        return self.searched or self.triggers

    @functools.cache  # noqa: B019 - specs are module constants
    def _plan(self) -> tuple[tuple[str, FieldType, tuple[str, ...]], ...]:
        return tuple((n, t, tuple(self.groups()[n])) for n, t in self.fields())

    # ------------------------------------------------------------ the C op table
    @functools.cache  # noqa: B019 - specs are module constants
    def layout(self) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
        """The C row columns: ints (int and bool fields), floats (the SGLang header's
        fraction of a second first, then the numbers), whether an ``upper`` field is kept."""
        ints = tuple(n for n, t in self.fields() if t in ("int", "bool"))
        head = ("ms",) if self.engine == "sglang" else ()
        floats = head + tuple(n for n, t in self.fields() if t in ("num", "unum"))
        has_str = any(t in TEXT_TYPES for _, t in self.fields())
        return ints, floats, has_str

    def program(self) -> tuple[bytes, bytes]:
        """(ops as int32, literal bytes) for ``_cscan.program``."""
        ints, floats, _ = self.layout()
        lits = bytearray()
        ops = _ops(self.items, ints, floats, lits)
        return struct.pack(f"<{len(ops)}i", *ops), bytes(lits)


# ---------------------------------------------------------------- derivations
_META = frozenset("\\.^$*+?()[]{}|")


def _esc(text: str) -> str:
    """A literal in both flavours (RE2 refuses some of ``re.escape``'s escapes)."""
    return "".join("\\" + c if c in _META else c for c in text)


# a plain free-text body to the end in RE2 (``Tail(text=True)``; C: cs_plain_rest; the
# per-line parsers read any text): "<" may stand, but not right after a digit
_NOT_D = r"[^\x00-\x08\x0a-\x1f\x7f^<0-9]"
PLAIN_TEXT_RE2 = r"(?:<|" + _NOT_D + r"|[0-9]+" + _NOT_D + r")*[0-9]*\r?\n?$"


def _rx(it: Item, flavor: Flavor, names: dict[str, int], find: bool = False) -> str:
    if isinstance(it, Lit):
        return _esc(it.text)
    if isinstance(it, OneOf):
        return "(?:" + "|".join(_esc(t) for t in it.texts) + ")"
    if isinstance(it, Field):
        body = _FIND_INT if find and it.type == "int" else _TYPE_RX[it.type]
        if it.name is None:
            return f"(?:{body})"
        k = names[it.name] = names.get(it.name, 0) + 1
        return f"(?P<{it.name if k == 1 else f'{it.name}__{k}'}>{body})"
    if isinstance(it, Opt):
        return "(?:" + "".join(_rx(x, flavor, names) for x in it.items) + ")?"
    if isinstance(it, Alt):
        return (
            "(?:" + "|".join("".join(_rx(x, flavor, names) for x in b) for b in it.branches) + ")"
        )
    if isinstance(it, Skip):
        return ".*?"
    if isinstance(it, Pad):
        return "[ \t]*"
    if isinstance(it, Bound):
        return r"\b"
    if isinstance(it, Find):
        if flavor == "re2":
            return ""  # no lookahead in RE2: LineSpec.finds
        ahead = "(?=.*?" + "".join(_rx(x, flavor, names, True) for x in it.items) + ")"
        return ahead if it.required else f"(?:{ahead})?"
    if it.text:
        return ".*$" if flavor == "python" else PLAIN_TEXT_RE2
    comma = ",?" if it.comma else ""
    return comma + (r"\s*$" if flavor == "python" else r"[ \t]*\r?\n?$")


def _kept(find: Find) -> tuple[str, FieldType]:
    """The one field a ``Find`` keeps."""
    for it in find.items:
        if isinstance(it, Field) and it.name is not None:
            return it.name, it.type
    raise ValueError("a Find keeps one field")


def _starts(items: tuple[Item, ...]) -> list[bytes]:
    """The literal texts a message can begin with, as far as they are fixed."""
    if not items:
        return [b""]
    it, rest = items[0], items[1:]
    if isinstance(it, Lit):
        return (
            [it.text.encode() + s for s in _starts(rest)]
            if len(it.text) < 4
            else [it.text.encode()]
        )
    if isinstance(it, OneOf):
        return [t.encode() + s for t in it.texts for s in _starts(rest)]
    if isinstance(it, Opt):
        return _starts(it.items + rest) + _starts(rest)
    if isinstance(it, Alt):
        return [s for b in it.branches for s in _starts(b + rest)]
    return [b""]


def _convert(typ: FieldType, text: str) -> Any:
    if typ == "int":
        return digits_int(text)
    if typ in ("num", "unum"):
        return float(text)
    if typ == "bool":
        return text == "True"
    return text


# opcodes of _cscan_prog.c (run); keep in step with the enum there
OP_LIT, OP_ONEOF, OP_INT, OP_BOOL, OP_NUM, OP_UPPER, OP_OPT, OP_ALT, OP_TAIL = range(1, 10)
OP_FIND, OP_QUOTED, OP_ID, OP_SKIP, OP_BOUND, OP_DOTID, OP_PAD = range(10, 17)


def _lit(text: str, lits: bytearray) -> tuple[int, int]:
    raw = text.encode()
    at = lits.find(raw)
    if at < 0:
        at = len(lits)
        lits += raw
    return at, len(raw)


def _ops(
    items: tuple[Item, ...], ints: tuple[str, ...], floats: tuple[str, ...], lits: bytearray
) -> list[int]:
    out: list[int] = []
    for it in items:
        if isinstance(it, Lit):
            out += [OP_LIT, *_lit(it.text, lits)]
        elif isinstance(it, OneOf):
            out += [OP_ONEOF, len(it.texts)]
            for t in it.texts:
                out += _lit(t, lits)
        elif isinstance(it, Field):
            if it.type in ("int", "bool"):
                col = ints.index(it.name) if it.name is not None else -1
                out += [OP_INT if it.type == "int" else OP_BOOL, col]
            elif it.type in ("num", "unum"):
                col = floats.index(it.name) if it.name is not None else -1
                out += [OP_NUM, col, int(it.type == "num")]
            else:
                op = {"upper": OP_UPPER, "quoted": OP_QUOTED, "dotid": OP_DOTID}.get(it.type, OP_ID)
                out += [op, 0 if it.name is not None else -1]
        elif isinstance(it, Opt):
            body = _ops(it.items, ints, floats, lits)
            out += [OP_OPT, _commit(it.items), len(body), *body]
        elif isinstance(it, Alt):
            out += [OP_ALT, len(it.branches)]
            for b in it.branches:
                body = _ops(b, ints, floats, lits)
                out += [_commit(b), len(body), *body]
        elif isinstance(it, Find):
            body = _ops(it.items, ints, floats, lits)
            out += [OP_FIND, int(it.required), len(body), *body]
        elif isinstance(it, Skip):
            out += [OP_SKIP]
        elif isinstance(it, Bound):
            out += [OP_BOUND]
        elif isinstance(it, Pad):
            out += [OP_PAD]
        else:
            out += [OP_TAIL, int(it.comma) | int(it.text) << 1]
    return out
