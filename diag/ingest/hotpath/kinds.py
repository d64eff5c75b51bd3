"""The periodic line shapes the hot path reads in bulk, one :class:`Kind` each.

Each kind is an anchored full-line RE2 pattern (header included) that accepts only the plain
common shape of the line, plus the builder that turns its groups into the event kind's
columns. The fixed-shape lines (SGLang decode D4, D5, D7, D9-D18 and prefill P5, P9-P13; vLLM
0.11 DEBUG step lines, V1 stats lines) are derived from their declarations in
``diag.lines.periodic`` (``declared``), the free-text request lines too (SGLang's ``Receive:`` / ``Finish:``,
vLLM's ``Received request`` and ``Added request``). Every free-text kind's triggers are derived from the active parsers (``Kind.with_triggers``).
RE2 runs in Latin-1 mode on binary arrays, so every ASCII delimiter is where the per-line
path, which decodes with ``replace``, sees it. Anything else stays on the per-line parsers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from diag.events import EVENT_KINDS
from diag.lines import headers as h
from diag.lines import periodic
from diag.lines.spec import TEXT_TYPES

# ---------------------------------------------------------------- shared pieces (RE2 syntax)
# the SGLang header forms of normalize.prefix (PROCESS_HEADER, SGLANG_HEADER, _PYLOG), as far
# as plain; the C header (_cscan_sglang.c cs_sg_header) reads the same subset
# (python logging behind a process prefix is left to the per-line path: peel keeps that
# prefix's rank there, the bracket header does not)
_PHEAD = rf"(?P<phead>\((?:{h.PROCESS_NAME_PLAIN}|) ?{h.PROCESS_PID}\)[ \t]*)"
_SG_HDR = (
    rf"^(?:{_PHEAD}?{h.SGLANG_BRACKET}"
    r"|(?P<pdate>\d{4}-\d\d-\d\d) (?P<ptime>\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    rf"(?:{'|'.join(h.LEVELS)}) \d+ \[(?P<pranks>(?:{h.RANK_WORD} )*)"
    r"[^\]\s:]+:\d+\]) ?"
)
_VL_HDR = rf"^{_PHEAD}?{h.VLLM_LEVEL}[ \t]+{h.VLLM_STAMP}[ \t]+\[?[A-Za-z0-9_./-]+:\d+\] ?"

# ---------------------------------------------------------------- kinds


@dataclass(frozen=True)
class Kind:
    """One periodic line shape: where it goes, how it is found, what must not be in it."""

    name: str  # tag, e.g. "sglang.decode"
    table: str  # event kind
    literal: bytes  # cheap memmem prefilter
    pattern: str  # anchored full-line RE2 with named groups
    build: Callable[[pa.StructArray], dict[str, Any]]  # groups -> field columns
    #: leftmost-search fields: (group, anchored RE2, field type, required: else the line
    #: stays per line); an int past INT_DIGITS digits or a non-ASCII text leaves it too
    extra: tuple[tuple[str, str, str, bool], ...] = ()
    heads: tuple[bytes, ...] = ()  # first 4 bytes of the message: the locator (see _msg_words)
    validate: str | None = None  # full-line RE2 (DFA, no captures) when ``pattern`` is a prefix
    #: the line carries free text (prompts, sampling parameters): it is consumed in bulk only
    #: when no trigger of another parser or branch occurs in it (``with_triggers``)
    free_text: bool = False
    #: words that are no parser's anchor but send this line elsewhere on the per-line path
    #: (a branch of the owning parser, the normaliser), or a field the bulk row lacks
    branches: tuple[str, ...] = ()
    #: the triggers a consumed line must not hold: derived, never written (``with_triggers``)
    exclude_words: tuple[str, ...] = ()
    #: the declaration the kind is derived from (``declared``)
    spec: periodic.LineSpec = field(kw_only=True)

    @property
    def exclude(self) -> str | None:
        """``exclude_words`` as one RE2 alternation (the RE2 path's form of the C LitSet)."""
        if not self.exclude_words:
            return None
        return "|".join(re.escape(w) for w in self.exclude_words)

    def with_triggers(self, anchors: Sequence[str]) -> Kind:
        """This kind with the triggers of the active parsers: every anchor (the words that
        make the per-line prefilter hand a line to some parser: phase markers, error
        signatures, block openers, other branches) except those the line's own literal
        holds, plus ``branches``. A free-text line holding one goes to the per-line path."""
        if not self.free_text:
            return self
        own = self.literal.decode()
        words = {a for a in anchors if a not in own} | set(self.branches)
        return replace(self, exclude_words=tuple(sorted(words)))


def _s(st: pa.StructArray, g: str) -> pa.Array:
    return st.field(g)


def _int(a: pa.Array) -> pa.Array:
    """'' / null -> null, digits -> int64."""
    a = pc.if_else(pc.equal(pc.binary_length(a), 0), pa.scalar(None, a.type), a)
    return pc.cast(pc.cast(a, pa.string()), pa.int64())


def _float(a: pa.Array) -> pa.Array:
    a = pc.if_else(pc.equal(pc.binary_length(a), 0), pa.scalar(None, a.type), a)
    return pc.cast(pc.cast(a, pa.string()), pa.float64())


def _bool(a: pa.Array) -> pa.Array:
    """'True'/'False'/'' -> true/false/null."""
    empty = pc.equal(pc.binary_length(a), 0)
    return pc.if_else(empty, pa.scalar(None, pa.bool_()), pc.equal(a, pa.scalar(b"True")))


def _dict_const(n: int, value: str) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


def concat_columns(arrays: list[pa.Array]) -> pa.Array:
    """Concatenate; dictionary arrays (per-part dictionaries) get one unified dictionary
    (its order does not matter: ``events.build_frame`` maps values, sorted categories;
    50x cheaper than decoding and encoding again)."""
    if pa.types.is_dictionary(arrays[0].type):
        return pa.chunked_array(arrays).unify_dictionaries().combine_chunks()
    return pa.concat_arrays(arrays)


def _null(n: int, typ: pa.DataType) -> pa.Array:
    return pa.nulls(n, typ)


# -- SGLang
# SGLangParser.feed: '"%|" in msg' reads a tqdm bar (no anchor of its own: "it/s]" is);
# normalize.prefix: '"repeated" in rest' reads ray's "[repeated Nx across cluster]"
_SG_REQ_BRANCHES = ("%|", "repeated")


# -- vLLM
# vLLM request lines: prompt_token_ids is a field (prompt_tokens) the bulk row does not
# read; "repeated" as for SGLang
_VL_REQ_BRANCHES = ("prompt_token_ids", "repeated")


# ---------------------------------------------------------------- declared lines


def finish_fields(spec: periodic.LineSpec, fields: dict[str, Any], n: int) -> dict[str, Any]:
    """A declared line's typed fields (Arrow, one per ``LineSpec.fields``) as its event
    kind's columns: the fields it never prints as missing (``absent``), and what the line
    implies beyond its fields. Both bulk paths use it."""
    types = dict(EVENT_KINDS[spec.table].fields)
    for name in spec.absent:
        fields[name] = _null(n, _ARROW[types[name]])
    for name, value in spec.consts:
        fields[name] = _dict_const(n, value)
    if spec.name == "vllm.step":
        mode, tok = fields["mode"], fields["padded_tokens"]
        return dict(
            mode=mode.dictionary_encode(),
            num_tokens=pc.if_else(pc.equal(mode, "NONE"), tok, pa.scalar(None, pa.int64())),
            padded_tokens=tok,
            num_reqs=fields["num_reqs"],
            uniform=fields["uniform"],
            count=pa.array(np.ones(n, np.int64)),
            origin=_dict_const(n, "debug_step"),
        )
    return fields


def _coalesce(st: pa.StructArray, groups: list[str]) -> pa.Array:
    """The text of a field placed more than once (an Alt): the group that matched."""
    out = _s(st, groups[0])
    for g in groups[1:]:
        out = pc.if_else(pc.greater(pc.binary_length(out), 0), out, _s(st, g))
    return out


_ARROW = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}

_RE2_TYPE: dict[str, Callable[[pa.Array], pa.Array]] = {
    "int": _int,
    "bool": _bool,
    "num": _float,
    "unum": _float,
    **{t: (lambda a: pc.cast(a, pa.string())) for t in TEXT_TYPES},
}


def _nocap(rx: str) -> str:
    return re.sub(r"\(\?P<\w+>", "(?:", rx)


def declared(spec: periodic.LineSpec, branches: tuple[str, ...] = ()) -> Kind:
    """The kind of a declared line: its RE2 pattern (the engine's header, then the message
    as ``LineSpec.regex("re2")``), locator heads and column builder, all from ``spec``. A
    free-text line (``LineSpec.free_text``) captures only up to its text (RE2's submatch
    engine is slow on long lines), is validated whole without captures, and reads its
    ``Find`` fields as leftmost searches (``extra``); ``branches`` as ``Kind.branches``."""
    groups = spec.groups()

    def build(st: pa.StructArray) -> dict[str, Any]:
        fields = {n: _RE2_TYPE[t](_coalesce(st, groups[n])) for n, t in spec.fields()}
        return finish_fields(spec, fields, len(st))

    header = _SG_HDR if spec.engine == "sglang" else _VL_HDR
    if not spec.searched:
        return Kind(
            spec.name,
            spec.table,
            spec.literal,
            header + spec.regex("re2"),
            build,
            heads=spec.heads(),
            free_text=spec.free_text,
            branches=branches,
            spec=spec,
        )
    return Kind(
        spec.name,
        spec.table,
        spec.literal,
        header + spec.regex("re2", tail=False),
        build,
        extra=tuple((n, _nocap(header) + rx, t, req) for n, t, req, rx in spec.finds()),
        heads=spec.heads(),
        validate=_nocap(header + spec.regex("re2")),
        free_text=True,
        branches=branches,
        spec=spec,
    )


SGLANG_KINDS: tuple[Kind, ...] = (
    declared(periodic.SG_DECODE),
    declared(periodic.SG_PREFILL),
    declared(periodic.SG_RECEIVE, _SG_REQ_BRANCHES),
    declared(periodic.SG_FINISH, _SG_REQ_BRANCHES),
)
VLLM_KINDS: tuple[Kind, ...] = (
    declared(periodic.VL_STEP),
    declared(periodic.VL_STATS),
    declared(periodic.VL_ITERATION),
    declared(periodic.VL_RECEIVED, _VL_REQ_BRANCHES),
    declared(periodic.VL_ADDED, _VL_REQ_BRANCHES),
)
ENGINE_KINDS = {"sglang": SGLANG_KINDS, "vllm": VLLM_KINDS}
#: the table rows of each engine: read in bulk only inside their block (``LineSpec.cells``)
ENGINE_ROWS: dict[str, tuple[Kind, ...]] = {
    "sglang": (),
    "vllm": (declared(periodic.VL_METRICS_ROW),),
}
#: the parser sets the kinds were checked against (class names, in scanner order)
SUPPORTED_PARSERS = {
    "sglang": ("SGLangParser", "ErrorParser", "BenchmarkParser", "CmdlineParser"),
    "vllm": ("VLLMParser", "ErrorParser", "BenchmarkParser", "CmdlineParser"),
}
