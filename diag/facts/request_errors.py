"""Errors of one request, told apart from the engine's (issue 34).

An engine that rejects one client's request (a prompt longer than the context, a malformed
body, a client gone) logs a traceback from its HTTP layer and goes on serving. That is no
outage: such errors are counted and shown (how many, which kinds, first and last) and never
make ``serving_failed``. An error is one request's when the server was serving before it, it
is no follow-on of a dead engine, its class is ``other``, its text names no engine failure,
and its frames place it in a request handler (phases.yaml ``request`` rows) or its text is
one the engines' HTTP layers print for one request (data/request_scope.yaml).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diag.engines.phases import REQUEST_PHASE
from diag.engines.request_scope import request_scope
from diag.facts.access import col

_EXC_NAME = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit|Interrupt))\b")


@dataclass(frozen=True)
class RequestError:
    kind: str
    message: str  # its first line
    path: str
    line: int

    @property
    def at(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class RequestErrors:
    """The request errors of a run: how many, of which kinds, first and last."""

    count: int
    kinds: tuple[tuple[str, int], ...]  # (kind, how many), most first
    first: RequestError
    last: RequestError
    served_after: bool  # serving lines follow the last one

    def kinds_text(self) -> str:
        return ", ".join(f"{n:,} {kind.replace('_', ' ')}" for kind, n in self.kinds)

    def summary(self) -> str:
        """One sentence: '2 requests failed (2 context length), first at x:1, last at x:9'."""
        what = "request failed" if self.count == 1 else "requests failed"
        out = f"{self.count:,} {what} ({self.kinds_text()})"
        if self.count == 1:
            return f"{out} at {self.first.at}"
        return f"{out}, first at {self.first.at}, last at {self.last.at}"

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "kinds": dict(self.kinds),
            "first": {"kind": self.first.kind, "message": self.first.message, "at": self.first.at},
            "last": {"kind": self.last.kind, "message": self.last.message, "at": self.last.at},
            "served_after": self.served_after,
        }


def _text(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return ""
    return str(v)


def kind_of(message: str) -> str:
    """A request error's kind: the engines' own text for it, else its exception's name."""
    named = request_scope().kind_of(message)
    if named is not None:
        return named
    m = _EXC_NAME.match(message.strip())
    return m.group(1) if m else "request_handler"


def request_scoped(errors: pd.DataFrame, order: np.ndarray, serving: np.ndarray) -> np.ndarray:
    """A mask over ``errors``: the rows that are one request's error (module docstring)."""
    if len(errors) == 0:
        return np.zeros(0, bool)
    scope = request_scope()
    first_serving = int(serving.min()) if len(serving) else None
    out = np.zeros(len(errors), bool)
    if first_serving is None:
        return out  # a request needs a serving server
    secondary = errors["secondary"].fillna(False).astype(bool).to_numpy()
    # the columns read, not ``itertuples`` (it makes a namedtuple class a call: ~7 ms)
    classes, messages, phases = (col(errors, c) for c in ("error_class", "message", "phase"))
    for i in range(len(out)):
        if int(order[i]) < first_serving:
            continue  # a request needs a serving server
        if secondary[i] or _text(classes[i]) != "other":
            continue
        message = _text(messages[i])
        if scope.engine_failed(message):
            continue
        placed = _text(phases[i]) == REQUEST_PHASE
        out[i] = placed or scope.kind_of(message) is not None
    return out


def summarise(
    errors: pd.DataFrame, mask: np.ndarray, order: np.ndarray, serving: np.ndarray
) -> RequestErrors | None:
    if not mask.any():
        return None
    at = [int(i) for i in np.flatnonzero(mask)]
    at.sort(key=lambda i: int(order[i]))

    def one(i: int) -> RequestError:
        row = errors.iloc[i]
        message = _text(row["message"]).split("\n", 1)[0].strip()
        return RequestError(kind_of(message), message[:240], str(row["source"]), int(row["line"]))

    kinds = Counter(kind_of(_text(errors.iloc[i]["message"])) for i in at)
    last_key = int(order[at[-1]])
    return RequestErrors(
        count=len(at),
        kinds=tuple(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        first=one(at[0]),
        last=one(at[-1]),
        served_after=bool(len(serving) and int(serving.max()) > last_key),
    )
