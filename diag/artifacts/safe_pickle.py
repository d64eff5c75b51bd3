"""A plain-data pickle reader that never unpickles: untrusted snapshot files stay data.

``pickle.load`` would run whatever the file asks for, even with a restricted
``find_class`` the attack surface stays large. :func:`read_plain_pickle` is a small opcode
interpreter that builds dict/list/tuple/str/bytes/int/float/bool/None (and memo
references) and refuses every opcode that imports, calls or extends objects.
"""

from __future__ import annotations

import pickletools
import struct
import time
from dataclasses import dataclass
from typing import Any


class SnapshotError(ValueError):
    """The file cannot be read as a snapshot (too big, truncated, malformed).

    The message starts with the file's path (it stands alone in logs and tracebacks);
    :attr:`reason` is the rest, for listings such as the report's ``inputs[]`` that show
    the path already.
    """

    path: str | None = None

    @property
    def reason(self) -> str:
        msg = str(self)
        if self.path and msg.startswith(f"{self.path}: "):
            return msg[len(self.path) + 2 :]
        return msg


class UnsafePickleError(SnapshotError):
    """The pickle uses an opcode outside plain data (imports, calls, object building)."""


class NotASnapshotError(SnapshotError):
    """A plain-data pickle that does not have the allocator snapshot structure."""


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    """What reading one pickle may cost, whatever its size on disk: a file built to exhaust
    memory or time (millions of tiny values; one block shared 200,000 times by each of 5,000
    segments, which a 533 KB file holds and a walk visits a billion times) is refused with
    the budget it broke, and the logs beside it are analysed."""

    # opcodes read (each builds or moves at most one value): ~45 MB of a snapshot's pickle,
    # 45 times the largest real one we hold; the 512 MiB file limit alone would allow 500 M
    values: int = 20_000_000
    # the walk of the data (each container entry once per path to it): at most this many
    # times the entries the pickle holds, and at least ``references_floor`` whatever it holds
    references_ratio: int = 16
    references_floor: int = 4_000_000
    nesting: int = 100  # containers inside containers (a real snapshot nests about 6 deep)
    # a backstop for a slow machine: values and references bound the work before it
    seconds: float = 30.0


BUDGET = Budget()
_CHECK_EVERY = 1 << 16  # opcodes between clock reads


def _over(path: str, what: str) -> SnapshotError:
    return SnapshotError(f"{path}: refused: {what} (a pickle built to exhaust memory or time)")


_CONTAINERS = (dict, list, tuple)


def check_references(root: Any, path: str, budget: Budget = BUDGET) -> int:
    """How many container entries a full walk of ``root`` visits (a shared container once per
    path to it), counted over the distinct containers only, so the count costs what the
    pickle holds, not what it expands to. Raises :class:`SnapshotError` past the budget's
    references or nesting, or on a container that holds itself."""
    walked: dict[int, int] = {}  # id -> entries a walk from it visits
    entries = 0
    on_path: set[int] = set()
    # (container, its container children, next child index, visits so far, entries): a
    # scalar child is one visit, counted when its container is entered (the same counts,
    # checks and order as a walk child by child, without a step per scalar: a snapshot is
    # mostly numbers and strings)
    todo: list[tuple[Any, list[Any], int, int, int]] = []
    plain = _CONTAINERS

    def enter(obj: Any) -> None:
        if len(todo) >= budget.nesting:
            raise _over(path, f"containers nested more than {budget.nesting} deep")
        on_path.add(id(obj))
        if type(obj) is dict:
            n = 2 * len(obj)
            kids = [v for kv in obj.items() for v in kv if type(v) in plain]
        else:
            n = len(obj)
            kids = [v for v in obj if type(v) in plain]
        todo.append((obj, kids, 0, n - len(kids), n))

    enter(root) if type(root) in plain else None
    limit = budget.references_floor
    while todo:
        obj, kids, i, visits, n = todo[-1]
        if i < len(kids):
            kid = kids[i]
            k = id(kid)
            if k in on_path:
                raise SnapshotError(f"{path}: malformed pickle: a container holds itself")
            if k in walked:
                todo[-1] = (obj, kids, i + 1, visits + 1 + walked[k], n)
            else:
                todo[-1] = (obj, kids, i + 1, visits + 1, n)
                enter(kid)
            continue
        todo.pop()
        on_path.discard(id(obj))
        walked[id(obj)] = visits
        entries += n
        limit = max(budget.references_floor, budget.references_ratio * entries)
        if visits > limit:
            raise _over(
                path,
                f"its {entries:,} container entries are walked {visits:,} times through "
                f"shared references, over the budget of {limit:,}",
            )
        if todo:
            parent, pk, pi, pv, pn = todo[-1]
            todo[-1] = (parent, pk, pi, pv + visits, pn)
    return walked.get(id(root), 0)


# --------------------------------------------------------------------------- reader

_OPNAMES: dict[int, str] = {ord(op.code): op.name for op in pickletools.opcodes}

# opcode bytes (protocol 0..5 binary forms that plain containers and scalars need)
_PROTO, _FRAME, _STOP = 0x80, 0x95, ord(".")
_EMPTY_DICT, _EMPTY_LIST, _EMPTY_TUPLE = ord("}"), ord("]"), ord(")")
_MARK, _SETITEM, _SETITEMS = ord("("), ord("s"), ord("u")
_APPEND, _APPENDS, _LIST, _DICT = ord("a"), ord("e"), ord("l"), ord("d")
_TUPLE, _TUPLE1, _TUPLE2, _TUPLE3 = ord("t"), 0x85, 0x86, 0x87
_BININT, _BININT1, _BININT2, _LONG1, _LONG4 = ord("J"), ord("K"), ord("M"), 0x8A, 0x8B
_BINUNICODE, _SHORT_BINUNICODE, _BINUNICODE8 = ord("X"), 0x8C, 0x8D
_BINBYTES, _SHORT_BINBYTES, _BINBYTES8 = ord("B"), ord("C"), 0x8E
_BINFLOAT, _NONE, _NEWTRUE, _NEWFALSE = ord("G"), ord("N"), 0x88, 0x89
_MEMOIZE, _BINPUT, _LONG_BINPUT = 0x94, ord("q"), ord("r")
_BINGET, _LONG_BINGET = ord("h"), ord("j")
_POP, _POP_MARK, _DUP = ord("0"), ord("1"), ord("2")

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct(">d")


class _Malformed(Exception):
    """Internal: an inconsistent stream (reported as SnapshotError with the offset)."""


def read_plain_pickle(data: bytes, path: str = "<bytes>", budget: Budget = BUDGET) -> Any:
    """Rebuild the plain data in a pickle without running anything from it.

    Raises :class:`UnsafePickleError` naming the first opcode outside plain data and its
    byte offset, and :class:`SnapshotError` for truncated or inconsistent streams and for a
    pickle past its :class:`Budget` (values, time, references, nesting).
    """
    if not data:
        raise SnapshotError(f"{path}: empty file, not a pickle")
    if data[0] not in _OPNAMES:
        raise SnapshotError(f"{path}: not a pickle (first byte 0x{data[0]:02x})")
    root = _interpret(bytes(data), path, budget)
    check_references(root, path, budget)
    return root


def _interpret(data: bytes, path: str, budget: Budget = BUDGET) -> Any:
    """The interpreter loop: hot opcodes (memo gets, ints, dict/list building) first.

    Reads past the end show up as ``pos > n`` (short slices) or IndexError/struct.error
    near the end; both are reported as truncation.
    """
    n = len(data)
    stack: list[Any] = []
    metastack: list[list[Any]] = []
    memo: dict[int, Any] = {}
    u32, i32, u16, u64, f64 = (
        _U32.unpack_from,
        _I32.unpack_from,
        _U16.unpack_from,
        _U64.unpack_from,
        _F64.unpack_from,
    )
    pos = at = ops = 0
    check_at = _CHECK_EVERY
    deadline = time.monotonic() + budget.seconds
    try:
        while pos < n:
            at = pos
            ops += 1
            if ops >= check_at:
                check_at += _CHECK_EVERY
                if ops > budget.values:
                    raise _over(path, f"more than {budget.values:,} values")
                if time.monotonic() > deadline:
                    raise _over(path, f"not read within {budget.seconds:g} s")
            op = data[pos]
            pos += 1
            if op == _BINGET:
                stack.append(memo[data[pos]])
                pos += 1
            elif op == _LONG_BINGET:
                stack.append(memo[u32(data, pos)[0]])
                pos += 4
            elif op == _MEMOIZE:
                memo[len(memo)] = stack[-1]
            elif op == _LONG1:
                size = data[pos]
                stack.append(int.from_bytes(data[pos + 1 : pos + 1 + size], "little", signed=True))
                pos += 1 + size
            elif op == _BININT1:
                stack.append(data[pos])
                pos += 1
            elif op == _MARK:
                metastack.append(stack)
                stack = []
            elif op == _SETITEMS:
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) is not dict or len(items) % 2:
                    raise _Malformed("SETITEMS needs a dict and key/value pairs")
                for i in range(0, len(items), 2):
                    target[items[i]] = items[i + 1]
            elif op == _EMPTY_DICT:
                stack.append({})
            elif op == _SHORT_BINUNICODE:
                size = data[pos]
                stack.append(data[pos + 1 : pos + 1 + size].decode("utf-8", "surrogatepass"))
                pos += 1 + size
            elif op == _APPENDS:
                items = stack
                stack = metastack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Malformed("APPENDS needs a list")
                target.extend(items)
            elif op == _EMPTY_LIST:
                stack.append([])
            elif op == _BININT:
                stack.append(i32(data, pos)[0])
                pos += 4
            elif op == _BININT2:
                stack.append(u16(data, pos)[0])
                pos += 2
            elif op == _APPEND:
                value = stack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise _Malformed("APPEND needs a list")
                target.append(value)
            elif op == _SETITEM:
                value = stack.pop()
                key = stack.pop()
                target = stack[-1]
                if type(target) is not dict:
                    raise _Malformed("SETITEM needs a dict")
                target[key] = value
            elif op == _TUPLE2:
                b = stack.pop()
                stack[-1] = (stack[-1], b)
            elif op == _NEWTRUE:
                stack.append(True)
            elif op == _NEWFALSE:
                stack.append(False)
            elif op == _BINUNICODE:
                size = u32(data, pos)[0]
                stack.append(data[pos + 4 : pos + 4 + size].decode("utf-8", "surrogatepass"))
                pos += 4 + size
            elif op == _BINFLOAT:
                stack.append(f64(data, pos)[0])
                pos += 8
            elif op == _NONE:
                stack.append(None)
            elif op == _FRAME:
                pos += 8  # frame length: a read-ahead hint only
            elif op == _PROTO:
                if data[pos] > 5:
                    raise SnapshotError(f"{path}: unsupported pickle protocol {data[pos]}")
                pos += 1
            elif op == _STOP:
                if not stack:
                    raise _Malformed("STOP with an empty stack")
                return stack.pop()
            elif op == _EMPTY_TUPLE:
                stack.append(())
            elif op == _TUPLE1:
                stack[-1] = (stack[-1],)
            elif op == _TUPLE3:
                c = stack.pop()
                b = stack.pop()
                stack[-1] = (stack[-1], b, c)
            elif op == _TUPLE:
                items = stack
                stack = metastack.pop()
                stack.append(tuple(items))
            elif op == _LIST:
                items = stack
                stack = metastack.pop()
                stack.append(items)
            elif op == _DICT:
                items = stack
                stack = metastack.pop()
                if len(items) % 2:
                    raise _Malformed("DICT needs key/value pairs")
                stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
            elif op == _LONG4:
                size = i32(data, pos)[0]
                if size < 0:
                    raise _Malformed("negative LONG4 size")
                stack.append(int.from_bytes(data[pos + 4 : pos + 4 + size], "little", signed=True))
                pos += 4 + size
            elif op == _BINUNICODE8:
                size = u64(data, pos)[0]
                stack.append(data[pos + 8 : pos + 8 + size].decode("utf-8", "surrogatepass"))
                pos += 8 + size
            elif op == _SHORT_BINBYTES:
                size = data[pos]
                stack.append(data[pos + 1 : pos + 1 + size])
                pos += 1 + size
            elif op == _BINBYTES:
                size = u32(data, pos)[0]
                stack.append(data[pos + 4 : pos + 4 + size])
                pos += 4 + size
            elif op == _BINBYTES8:
                size = u64(data, pos)[0]
                stack.append(data[pos + 8 : pos + 8 + size])
                pos += 8 + size
            elif op == _BINPUT:
                memo[data[pos]] = stack[-1]
                pos += 1
            elif op == _LONG_BINPUT:
                memo[u32(data, pos)[0]] = stack[-1]
                pos += 4
            elif op == _POP:
                if stack:
                    stack.pop()
                else:
                    stack = metastack.pop()
            elif op == _POP_MARK:
                stack = metastack.pop()
            elif op == _DUP:
                stack.append(stack[-1])
            else:
                name = _OPNAMES.get(op)
                what = f"opcode {name}" if name else f"unknown opcode 0x{op:02x}"
                raise UnsafePickleError(
                    f"{path}: refusing pickle {what} at byte {at}: only plain data "
                    "(dict/list/tuple/str/bytes/int/float/bool/None) is loaded"
                )
    except SnapshotError:
        raise
    except _Malformed as exc:
        raise SnapshotError(f"{path}: malformed pickle at byte {at}: {exc}") from None
    except (IndexError, struct.error) as exc:
        if pos >= n - 8:
            raise SnapshotError(
                f"{path}: truncated pickle (ends inside the opcode at byte {at})"
            ) from None
        raise SnapshotError(
            f"{path}: malformed pickle at byte {at}: {type(exc).__name__}: {exc}"
        ) from None
    except Exception as exc:  # any other inconsistency in untrusted bytes means a bad file
        raise SnapshotError(
            f"{path}: malformed pickle at byte {at}: {type(exc).__name__}: {exc}"
        ) from None
    raise SnapshotError(f"{path}: truncated pickle (no STOP opcode within {n} bytes)")
