"""Which error texts are one request's and which the engine's: data in ``data/request_scope.yaml``.

A client's bad request (a prompt longer than the context, a malformed body) raises in the
API server's handler and the server goes on serving; calling that an outage pages someone
for a client's mistake. The texts are the engines' own (their HTTP layers, cited per row);
the frames that place an error in a request handler are phases.yaml rows of phase
``request``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import yaml

from diag.engines.phases import DATA


@dataclass(frozen=True)
class RequestText:
    kind: str
    regex: re.Pattern[str]
    source: str


@dataclass(frozen=True)
class RequestScope:
    requests: tuple[RequestText, ...]
    engine: re.Pattern[str]  # texts of a failed engine, whatever frames carry them

    def kind_of(self, message: str) -> str | None:
        """The request kind a message names (None when it names none)."""
        for row in self.requests:
            if row.regex.search(message):
                return row.kind
        return None

    def engine_failed(self, message: str) -> bool:
        return self.engine.search(message) is not None


@cache
def request_scope() -> RequestScope:
    raw = yaml.safe_load((DATA / "request_scope.yaml").read_text(encoding="utf-8"))
    rows = tuple(
        RequestText(str(r["kind"]), re.compile(r["regex"]), str(r["source"]))
        for r in raw["requests"]
    )
    engine = re.compile("|".join(f"(?:{r['regex']})" for r in raw["engine"]))
    return RequestScope(rows, engine)
