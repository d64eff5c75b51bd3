"""Event frames from the sink's buffers: the columnar layout of every event table.

The bulk reader (``diag.ingest.hotpath``) hands over Arrow columns per block; the sink keeps
them compact (numbers in the frame's own numpy layout, categoricals as codes, request ids as
Arrow strings), so Arrow's allocator gets its pages back block by block. ``build_frame``
writes each column of a kind once into its final buffer, from the per-line buffers and the
bulk pieces, and drops the sink's buffers of that column right after: the sink and the frame
are never both whole in memory. Both paths (bulk and per-line) end in ``build_frame``, so
they give the same dtypes by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    # imported where frames are built (the parent): the scan workers, which only compact
    # their bulk columns here, never load pandas
    import pandas as pd

#: dtypes a field may have: numbers are stored as float64 (NaN = missing) and
#: converted to nullable pandas dtypes; "json" holds lists/dicts as JSON text.
FieldType = str  # "int" | "float" | "bool" | "str" | "json"
Fields = tuple[tuple[str, FieldType], ...]


@dataclass(frozen=True)
class BulkCodes:
    """A bulk column of a categorical: codes into a few values (-1 = missing)."""

    values: tuple[str | None, ...]
    codes: np.ndarray | None  # int32; None: every row is values[0]


@dataclass(frozen=True)
class BulkNumbers:
    """A bulk column of numbers in the frame's own layout (no Arrow buffer kept)."""

    values: np.ndarray | None  # float64 (NaN = missing), int64 or bool; None: all missing
    missing: np.ndarray | None  # int/bool: True where missing; None: nothing missing


#: one bulk column as the sink keeps it: numbers and codes copied out of the Arrow arrays
#: the hot path hands over (so Arrow's allocator gets its pages back block by block), strings
#: (request ids) as their Arrow array. A scanner may hand BulkCodes / BulkNumbers directly.
BulkColumn = Any  # BulkCodes | BulkNumbers | pa.Array

#: one batch of rows read in bulk (``diag.ingest.hotpath``): exactly the kind's columns, and
#: per row the number of per-line rows of the sink's table that precede it
BulkPart = tuple[dict[str, BulkColumn], np.ndarray]


def compact_bulk(kind: str, fields: Fields, columns: dict[str, Any]) -> dict[str, BulkColumn]:
    """A block's Arrow (or numpy) columns in the sink's compact form; see ``BulkColumn``."""
    import pyarrow as pa

    categorical = categorical_columns(kind)
    arrow_str = ARROW_STRING.get(kind, frozenset())
    out: dict[str, BulkColumn] = {}
    for name, t in {**_COMMON_TYPES, **dict(fields)}.items():
        arr = columns[name]
        if isinstance(arr, (BulkCodes, BulkNumbers)):  # a scanner that builds them itself
            out[name] = arr
            continue
        if isinstance(arr, np.ndarray):
            arr = pa.array(arr)
        if name in categorical:
            out[name] = _compact_codes(arr)
        elif t in ("int", "float", "bool"):
            out[name] = _compact_numbers(t, arr)
        elif name in arrow_str:
            out[name] = arr.cast(pa.large_string())
        else:
            out[name] = arr
    return out


def _compact_codes(arr: Any) -> BulkCodes:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    values = tuple(arr.dictionary.to_pylist())
    if len(values) == 1 and arr.null_count == 0:
        return BulkCodes(values, None)
    codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    return BulkCodes(values, codes)


def _compact_numbers(t: FieldType, arr: Any) -> BulkNumbers:
    if arr.null_count == len(arr):
        return BulkNumbers(None, None)
    if t == "float":  # copied: a view would keep the Arrow buffer alive
        return BulkNumbers(np.array(arr.fill_null(np.nan).to_numpy(zero_copy_only=False)), None)
    missing = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    filled = arr.fill_null(0 if t == "int" else False) if arr.null_count else arr
    dtype = np.int64 if t == "int" else np.bool_
    return BulkNumbers(np.array(filled.to_numpy(zero_copy_only=False), dtype=dtype), missing)


_COMMON_TYPES: dict[str, FieldType] = {
    "source": "str",
    "line": "int",
    "ts": "float",
    "rank": "str",
    "instance": "str",
}


def build_frame(
    kind: str,
    fields: Fields,
    n_line: int,
    line_cols: dict[str, Any] | None,
    parts: list[BulkPart],
) -> pd.DataFrame:
    """The frame of one kind: the per-line rows (``n_line`` rows in ``line_cols``, one buffer
    per column) and the bulk rows, in emission order. Each column is written once into its
    final buffer and the sink's buffers of that column are dropped (and given back to the
    system) right after. Consumes ``line_cols`` and ``parts``.
    """
    import pandas as pd

    types = {**_COMMON_TYPES, **dict(fields)}
    at = np.concatenate([a for _, a in parts]) if parts else np.zeros(0, np.int64)
    n_bulk = len(at)
    n = n_line + n_bulk
    line_pos: Any = slice(None)
    bulk_pos = np.zeros(0, np.int64)
    if n_bulk:
        if np.all(at[1:] >= at[:-1]):
            bulk_pos = np.arange(n_bulk) + at
            line_pos = np.arange(n_line) + np.searchsorted(at, np.arange(n_line), side="right")
        else:  # not expected (positions grow with the scan); an interleave by stable sort
            keys = np.concatenate([2 * np.arange(n_line) + 1, 2 * at])
            final = np.empty(n, np.int64)
            final[np.argsort(keys, kind="stable")] = np.arange(n)
            line_pos, bulk_pos = final[:n_line], final[n_line:]
    del at
    bounds = np.cumsum([0] + [len(a) for _, a in parts])
    positions = [bulk_pos[bounds[i] : bounds[i + 1]] for i in range(len(parts))]
    slots = [_slot(p) for p in positions]  # once per part, not per column
    categorical = categorical_columns(kind)
    arrow_str = ARROW_STRING.get(kind, frozenset()) if _str_dtype() is not None else frozenset()
    data: dict[str, Any] = {}
    for name, t in types.items():
        bulk = [cols[name] for cols, _ in parts]
        col = line_cols[name] if line_cols is not None else None
        if name in categorical:
            data[name] = _categorical(n, col, line_pos, list(zip(slots, bulk, strict=True)))
        elif name in arrow_str:
            data[name] = _arrow_strings(n, col, line_pos, list(zip(positions, bulk, strict=True)))
        else:
            data[name] = _column(t, n, col, line_pos, list(zip(slots, bulk, strict=True)))
        del bulk, col
        for cols, _ in parts:
            cols[name] = None  # the sink's buffer is no longer needed
        if line_cols is not None:
            line_cols[name] = None
        if n > _RELEASE_ROWS:
            release_freed_memory()
    # copy=False: the columns are ours; the default would copy the float columns into one
    # 2-D block (a second copy of them, 40 MB on a 700 MB log)
    return pd.DataFrame(data, columns=column_index(list(types)), copy=False)


def column_index(names: list[str]) -> pd.Index:
    """A frame's column labels as a plain object Index. pandas 3 infers its Arrow-backed
    ``str`` dtype for a list of names, and every column read (``frame[name]``) then pays an
    Arrow scalar lookup: ~6 us of ~17, some 300,000 reads for 1,000 pod logs. The values'
    dtypes are untouched; frames sliced or assigned from these keep the object labels."""
    import pandas as pd

    return pd.Index(names, dtype=object)


_RELEASE_ROWS = 100_000


def release_freed_memory() -> None:
    """Give memory freed so far back to the system. Arrow's allocator (mimalloc) keeps freed
    buffers cached, and glibc keeps freed pages inside its heap (the sink's many small
    arrays, interleaved with block temporaries) until ``malloc_trim``: without this the
    frames being built come on top of the sink's freed pages (120-150 MB on a 700 MB log)."""
    import sys

    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_TRIM: list[Any] = []


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None elsewhere: musl, macOS, Windows)."""
    if not _TRIM:
        fn = None
        try:
            import ctypes

            fn = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError, TypeError):  # pragma: no cover - no C library
            fn = None
        _TRIM.append(fn)
    return _TRIM[0]


#: columns with few distinct values, stored as pandas categoricals (one small code per row)
CATEGORICAL = frozenset({"source", "rank", "instance", "engine"})
#: the same for columns of one kind: the few actions, modes and origins of the big periodic
#: tables of request and step lines
KIND_CATEGORICAL: dict[str, frozenset[str]] = {
    "request": frozenset({"action"}),
    "graph_step": frozenset({"mode", "origin"}),
}
#: string columns with a new value on almost every row (each request id is on a receive and
#: a finish line): pandas' Arrow-backed ``str`` dtype, one buffer instead of a str per row
ARROW_STRING: dict[str, frozenset[str]] = {"request": frozenset({"request_id"})}


@cache
def _str_dtype() -> Any:
    """pandas' Arrow-backed string dtype with NaN for missing (``str`` in pandas 3), None on
    a pandas without it (2.0: those columns stay object, ``build_frame``)."""
    import pandas as pd

    try:
        return pd.StringDtype("pyarrow", na_value=np.nan)
    except TypeError:  # pragma: no cover - pandas < 2.3
        try:
            return pd.StringDtype("pyarrow_numpy")
        except (TypeError, ValueError):  # pandas < 2.1
            return None


def categorical_columns(kind: str) -> frozenset[str]:
    """The columns of a kind's frame that are categoricals (both paths)."""
    extra = KIND_CATEGORICAL.get(kind)
    return CATEGORICAL if extra is None else CATEGORICAL | extra


Slot = slice | np.ndarray  # a part's rows in the frame: a slice where they are consecutive


def _slot(pos: np.ndarray) -> Slot:
    """``pos`` as a slice where it is a run of consecutive rows, as a bulk part's rows are
    unless per-line rows fall between them (a memcpy per column, not a scatter)."""
    if len(pos) and int(pos[-1]) - int(pos[0]) + 1 == len(pos) and np.all(pos[1:] > pos[:-1]):
        return slice(int(pos[0]), int(pos[-1]) + 1)
    return pos


def _categorical(n: int, col: Any, line_pos: Any, pieces: list[tuple[Slot, BulkCodes]]) -> Any:
    """A categorical column; categories sorted, so both paths give the same ones. Values that
    are not str are missing, on both paths."""
    import pandas as pd

    line_values = np.array(col if col is not None else [], dtype=object)
    uniq = {v for v in pd.unique(line_values) if isinstance(v, str)}
    for _, piece in pieces:
        uniq.update(v for v in piece.values if isinstance(v, str))
    categories = pd.Index(sorted(uniq), dtype=object)
    codes = np.full(n, -1, np.int32)
    if len(line_values):
        codes[line_pos] = categories.get_indexer(pd.Index(line_values, dtype=object))
    # a block's few values looked up in a dict (pandas' get_indexer infers a string dtype for
    # each small object array first: ~2 ms a call, 80 calls on a 700 MB vLLM log)
    code_of = {v: i for i, v in enumerate(categories)}
    lookups: dict[tuple[str | None, ...], np.ndarray] = {}  # blocks mostly share their values
    for where, piece in pieces:
        lookup = lookups.get(piece.values)
        if lookup is None:
            found = [code_of.get(v, -1) if isinstance(v, str) else -1 for v in piece.values]
            lookup = lookups[piece.values] = np.array(found + [-1], dtype=np.int32)
        codes[where] = lookup[0] if piece.codes is None else lookup[piece.codes]
    return pd.Categorical.from_codes(codes, categories=categories)


def _arrow_strings(n: int, col: Any, line_pos: Any, pieces: list[tuple[np.ndarray, Any]]) -> Any:
    """An Arrow-backed ``str`` column: the per-line values and the bulk arrays (each in row
    order) interleaved by zero-copy slices and concatenated once. Values that are not str
    are missing, on both paths."""
    import pandas as pd
    import pyarrow as pa

    large = pa.large_string()
    line = pa.array(
        [v if isinstance(v, str) else None for v in col] if col is not None else [], large
    )
    bulk = [arr.cast(large) for _, arr in pieces]
    at_line = np.arange(n)[line_pos]  # final rows of the per-line values, in their order
    at_bulk = np.concatenate([p for p, _ in pieces]) if pieces else np.zeros(0, np.int64)
    if np.any(at_bulk[1:] <= at_bulk[:-1]) or np.any(at_line[1:] <= at_line[:-1]):
        source = np.empty(n, np.int64)  # not expected (see build_frame): one take
        source[at_line] = np.arange(len(line))
        source[at_bulk] = len(line) + np.arange(len(at_bulk))
        whole = pa.concat_arrays([line, *bulk]).take(pa.array(source))
    else:
        rows = pa.chunked_array(bulk, large)
        chunks: list[Any] = []
        placed = 0  # bulk rows placed so far
        for k, at in enumerate(at_line.tolist()):
            if at - k > placed:  # the bulk rows before per-line row k
                chunks.extend(rows.slice(placed, at - k - placed).chunks)
                placed = at - k
            chunks.append(line.slice(k, 1))
        chunks.extend(rows.slice(placed).chunks)
        whole = pa.concat_arrays(chunks) if chunks else line
    return pd.array(whole, dtype=_str_dtype())


def _column(t: FieldType, n: int, col: Any, line_pos: Any, pieces: list[tuple[Slot, Any]]) -> Any:
    import pandas as pd

    if t in ("int", "float", "bool"):
        values = np.empty(n, np.float64 if t == "float" else np.int64 if t == "int" else np.bool_)
        mask = np.zeros(n, np.bool_)
        if col is not None and len(col):
            f = np.frombuffer(col, np.float64)
            if t == "float":
                values[line_pos] = f
            else:
                missing = np.isnan(f) if t == "int" else (f != 1.0) & (f != 0.0)
                mask[line_pos] = missing
                values[line_pos] = np.where(missing, 0, np.round(f)) if t == "int" else f == 1.0
        for where, piece in pieces:
            if piece.values is None:  # all missing
                values[where] = np.nan if t == "float" else 0
                mask[where] = True
                continue
            values[where] = piece.values
            if piece.missing is not None:
                mask[where] = piece.missing
        if t == "float":
            return values
        if t == "int":
            return pd.arrays.IntegerArray(values, mask)
        return pd.arrays.BooleanArray(values, mask)
    obj = np.empty(n, object)
    if col is not None and len(col):
        obj[line_pos] = col
    for where, arr in pieces:
        if hasattr(arr, "dictionary"):  # dictionary-encoded: share one str per value
            obj[where] = arr.dictionary.to_numpy(zero_copy_only=False)[arr.indices.to_numpy()]
        else:
            obj[where] = arr.to_numpy(zero_copy_only=False)
    return pd.Series(obj, dtype="object", copy=False)
