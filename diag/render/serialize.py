"""JSON and YAML renderings of the report (machine-readable, deterministic), and the
ticket record as displayed in the HTML and Markdown reports.

- ``to_json``: the report contract, full lists; scalar lists (capture sizes) on one line,
  and a run's bucket frontier cut to the rows its decision weighs (the recommended set and
  the rows beside it): the JSON per run grows with what the log shows, not with fixed
  tables (``graphdiag recommend --format json`` keeps every row).
- ``to_yaml`` (``--format yaml``): the ticket records, full lists, short scalar lists and
  histograms in flow style (one wrapped line, not one line per capture size).
- ``record_yaml``: the same records for people: a capture size list longer than
  :data:`COMPACT_FROM` is written as ``1, 2, 4, 8-256 step 8, ... (51 sizes)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from diag.render.fleet import fleet_json
from diag.render.sizes import compact_sizes
from diag.report import Report, RunReport, clean_json

COMPACT_FROM = 17  # lists up to 16 sizes read fine as a list


#: frontier rows kept per run on each side of the recommended one (the frontier is ordered by K)
FRONTIER_NEIGHBOURS = 1


def to_json(report: Report) -> str:
    """The report contract as one text (:func:`json_chunks` joined)."""
    return "".join(json_chunks(report))


def json_chunks(report: Report) -> Iterator[str]:
    """The report contract in pieces, each run's part made, encoded, written and let go in
    turn: a fleet's document never exists whole, as objects (1,000 pods: 14 MB of JSON,
    several times that as dicts and string fragments) or as text."""
    doc = report.to_dict(runs=False)
    fleet = report.fleet  # two runs or more: the fleet summary, an additive key
    if fleet is not None:
        doc["fleet"] = fleet_json(fleet)
    yield "{"
    for n, (k, v) in enumerate(doc.items()):
        yield "".join(["\n" if n == 0 else ",\n", "  ", _key(k), ": "])
        if k == "runs":
            yield from _runs_json(report.runs, "  ")
        else:
            yield "".join(_encode(v, "  "))
    yield "\n}\n"


def _runs_json(runs: list[RunReport], pad: str) -> Iterator[str]:
    """The ``runs`` list as :func:`_encode` lays it out, one run's dict at a time."""
    if not runs:
        yield "[]"
        return
    inner = pad + "  "
    yield "["
    for n, r in enumerate(runs):
        run = r.to_dict()
        rec = run.get("recommendation")
        if isinstance(rec, dict) and isinstance(rec.get("frontier"), list):
            rec["frontier_rows"] = len(rec["frontier"])
            rec["frontier"] = frontier_summary(rec["frontier"])
        yield "".join(["\n" if n == 0 else ",\n", inner, *_encode(run, inner)])
    yield "".join(["\n", pad, "]"])


def frontier_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frontier rows a run's decision weighs: the recommended set and the rows beside it
    (the frontier is ordered by K); without a recommended row, the cheapest and its."""
    if not rows:
        return rows
    picked = [i for i, r in enumerate(rows) if r.get("recommended")]
    if not picked:
        costs = [
            (c, i) for i, r in enumerate(rows) if isinstance(c := r.get("total_s_h"), int | float)
        ]
        picked = [min(costs)[1]] if costs else [0]
    keep = {
        j
        for i in picked
        for j in range(i - FRONTIER_NEIGHBOURS, i + FRONTIER_NEIGHBOURS + 1)
        if 0 <= j < len(rows)
    }
    return [rows[j] for j in sorted(keep)]


def _key(k: Any) -> str:
    """A key as ``json.dumps`` writes it (int and float keys as strings, True as "true")."""
    if type(k) is not str:
        k = next(iter(json.loads(json.dumps({k: 0}))))
    return _text(k)


#: json's own string encoder (its C version where built), as ``json.dumps(ensure_ascii=False)``
_text = json.encoder.encode_basestring
_CONSTANTS = {None: "null", True: "true", False: "false"}


def _scalar(v: Any) -> str:
    """``json.dumps(v, ensure_ascii=False)`` of a scalar, without an encoder a value (a
    fleet's report writes ~600 scalars a run)."""
    t = type(v)
    if t is str:
        return _text(v)
    if t is int:
        return int.__repr__(v)
    if t is float and v - v == 0:  # finite (json writes NaN and Infinity its own way)
        return float.__repr__(v)
    if v is None or t is bool:
        return _CONSTANTS[v]
    return json.dumps(v, ensure_ascii=False)


def _encode(value: Any, pad: str) -> list[str]:
    """``json.dumps(indent=2)``'s layout, but a list of scalars on one line (a capture size
    list is one line, not one line per size)."""
    if isinstance(value, dict) and value:
        inner = pad + "  "
        out = ["{"]
        for n, (k, v) in enumerate(value.items()):
            out += ["\n" if n == 0 else ",\n", inner, _key(k), ": "]
            out += _encode(v, inner)
        return [*out, "\n", pad, "}"]
    if isinstance(value, list | tuple) and value and not all(map(_is_scalar, value)):
        inner = pad + "  "
        out = ["["]
        for n, v in enumerate(value):
            out += ["\n" if n == 0 else ",\n", inner]
            out += _encode(v, inner)
        return [*out, "\n", pad, "]"]
    return [_scalar(value)]


def ticket_records(report: Report) -> Iterator[dict[str, Any]]:
    """The ticket record of every run (the DOMAIN.md field set, INTERFACE.md names), made
    as they are read."""
    for run in report.runs:
        yield {
            "run": run.label,
            "backend": run.backend,
            "engine_version": run.engine_version,
            "verdict": run.verdict,
            "verdict_reason": run.verdict_reason,
            **clean_json(run.record.to_json()),
            "findings": [f"{f.code} {f.name} ({f.severity})" for f in run.findings],
        }


#: libyaml's emitter where PyYAML was built with it: a fleet's ticket records took 4 s of
#: pure-Python emitting for 300 runs (the same text: tests/test_ticket_yaml.py)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _FlowDumper(_SafeDumper):  # type: ignore[valid-type,misc]
    """Flow style for lists and int-keyed maps of scalars (bucket lists, histograms)."""


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _repr_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(_is_scalar(v) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _repr_dict(dumper: yaml.SafeDumper, data: dict[Any, Any]) -> yaml.Node:
    flow = (
        bool(data)
        and all(_is_scalar(v) and not isinstance(v, str) for v in data.values())
        and all(str(k).lstrip("-").isdigit() for k in data)
    )
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


_FlowDumper.add_representer(list, _repr_list)
_FlowDumper.add_representer(dict, _repr_dict)


def _dump(doc: dict[str, Any] | list[Any]) -> str:
    return yaml.dump(doc, Dumper=_FlowDumper, sort_keys=False, allow_unicode=True, width=100)


TICKET_SCHEMA = "graphdiag.ticket/1"


def yaml_chunks(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The ticket document of ``records`` in pieces, one run's record dumped at a time: the
    text a whole dump gives (tests/test_ticket_yaml.py), without its node tree (PyYAML
    represents a document whole before emitting it: ~0.1 MB a run, 450 MB for 10,000)."""
    none = True
    for rec in records:
        if none:
            yield _dump({"schema": TICKET_SCHEMA}) + "runs:\n"
            none = False
        yield _dump([rec])
    if none:
        yield _dump({"schema": TICKET_SCHEMA, "runs": []})


def to_yaml(report: Report) -> str:
    return "".join(yaml_chunks(ticket_records(report)))


def record_chunks(report: Report) -> Iterator[str]:
    """The ticket record for display, in pieces: long capture size lists compacted (the
    JSON report and ``--format yaml`` keep them in full)."""
    return yaml_chunks(_compacted(ticket_records(report)))


def record_yaml(report: Report) -> str:
    return "".join(record_chunks(report))


def _compacted(records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for rec in records:
        sizes = rec.get("graph_capture_sizes")
        if isinstance(sizes, list) and len(sizes) >= COMPACT_FROM:
            rec["graph_capture_sizes"] = compact_sizes(sizes)
        yield rec
