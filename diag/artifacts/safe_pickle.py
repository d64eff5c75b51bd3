"""A plain-data pickle reader that never unpickles: untrusted snapshot files stay data.

``pickle.load`` would run whatever the file asks for, even with a restricted
``find_class`` the attack surface stays large. :func:`read_plain_pickle` is a small opcode
interpreter that builds dict/list/tuple/str/bytes/int/float/bool/None (and memo
references) and refuses every opcode that imports, calls or extends objects.
"""

from __future__ import annotations

import pickletools
import struct
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


def read_plain_pickle(data: bytes, path: str = "<bytes>") -> Any:
    """Rebuild the plain data in a pickle without running anything from it.

    Raises :class:`UnsafePickleError` naming the first opcode outside plain data and its
    byte offset, and :class:`SnapshotError` for truncated or inconsistent streams.
    """
    if not data:
        raise SnapshotError(f"{path}: empty file, not a pickle")
    if data[0] not in _OPNAMES:
        raise SnapshotError(f"{path}: not a pickle (first byte 0x{data[0]:02x})")
    return _interpret(bytes(data), path)


def _interpret(data: bytes, path: str) -> Any:
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
    pos = at = 0
    try:
        while pos < n:
            at = pos
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
