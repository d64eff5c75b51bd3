"""The import contract: data flows one way through the layers of diag/, no module imports
one above it, nothing imports in a cycle (between modules, packages or folders), no package
reaches into another's private names, and no module of diag/ grows past 600 lines.

Every import counts, at the top of a module, inside a function or under TYPE_CHECKING:
a lazy import still couples the two modules. ``import a.b.c`` (``as x`` or not) imports
the packages ``a.b`` (their ``__init__``) too: it binds the name through them, so a package
``__init__`` that imports a module doing ``import a.b.c`` is a cycle. ``from a.b import c``
of a submodule imports that submodule only. The layers, bottom to top (a module may import
its own layer or any layer below):
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

LAYERS: list[tuple[str, ...]] = [
    # leaves: shared records, tool version, package data, engine specs (pure data), how a
    # figure reads (every layer that writes one: rules, advice, renderers), the names of a
    # batch's classification
    (
        "diag.model",
        "diag.about",
        "diag.resources",
        "diag.engines",
        "diag.figures",
        "diag.batch_labels",
        # values kept on disk while a report holds many runs
        "diag.spill",
        # the line declarations: their spec language and the periodic lines
        "diag.lines",
    ),
    # bytes in: files, prefixes and physical lines, artifact formats (snapshots, tables)
    ("diag.sources", "diag.normalize", "diag.artifacts"),
    # the event-table schema the parsers write into
    ("diag.events", "diag.event_frames"),
    ("diag.parsers",),
    ("diag.ingest",),
    ("diag.facts",),
    ("diag.advise",),
    ("diag.rules",),
    # the fleet summary (made with the report), the report, the comparison of two
    ("diag.summary", "diag.report", "diag.comparison"),
    ("diag.render",),
    # the stages in order (diag.pipeline), and the evidence lines its report stage reads
    ("diag.evidence", "diag.pipeline"),
    # orchestration and outputs over everything below
    (
        "diag.api",
        "diag.export",
        "diag.export_parquet",
        "diag.output",
        "diag.fleet",
    ),
    ("diag.cli", "diag.entry", "diag.__main__", "diag"),
]
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "diag").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()
# compiled extensions (``from diag.x import _ext`` imports the submodule, which imports nothing)
EXTENSIONS = {
    ".".join([*p.relative_to(ROOT).parent.parts, p.name.split(".")[0]])
    for pattern in ("*.so", "*.pyd")
    for p in (ROOT / "diag").rglob(pattern)
}


def _imports(name: str, path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, imported names, line) for every diag import of a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "diag":
                    yield alias.name, [], node.lineno
                    # its packages too (not the facade ``diag``, see the last test below)
                    for i in range(2, len(parts)):
                        yield ".".join(parts[:i]), [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "diag":
                continue
            plain = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES or sub in EXTENSIONS:  # `from diag.facts import classify`
                    yield sub, [], node.lineno
                else:
                    plain.append(alias.name)
            if plain:
                yield target, plain, node.lineno


def _graph() -> dict[str, set[str]]:
    return {
        name: {t for t, _, _ in _imports(name, path) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }


def _layer(module: str) -> int:
    best, where = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, where = len(p), i
    return where


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if _layer(m) < 0] == []


def test_no_import_goes_up_a_layer() -> None:
    bad = [
        f"{src} (layer {_layer(src)}) imports {dst} (layer {_layer(dst)})"
        for src, dsts in _graph().items()
        for dst in sorted(dsts)
        if _layer(dst) > _layer(src)
    ]
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _folder(module: str) -> str:
    """diag.parsers.vllm.runtime -> diag.parsers; top-level modules are their own folder."""
    return ".".join(module.split(".")[:2])


def _package(module: str) -> str:
    """The package a module is in: a package's ``__init__`` is its own package."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the packages its modules import. A package and the packages nested in it
    are one subtree (a subpackage's modules use their parent's, the parent's registry uses
    the subpackage): edges along the nesting are the module graph's to judge, not this one."""
    out: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        a = _package(src)
        for d in dsts:
            b = _package(d)
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                out.setdefault(a, set()).add(b)
    return out


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_packages() -> None:
    assert _cycles(_packages(_graph())) == []


def test_no_import_cycle_between_folders() -> None:
    folders: dict[str, set[str]] = {}
    for src, dsts in _graph().items():
        folders.setdefault(_folder(src), set()).update(
            _folder(d) for d in dsts if _folder(d) != _folder(src) and d != "diag"
        )
    folders.pop("diag", None)  # the package facade re-exports api lazily; nothing imports it
    assert _cycles(folders) == []


def test_no_private_name_crosses_a_folder() -> None:
    bad = [
        f"{name}:{line} imports {target}.{n}"
        for name, path in MODULES.items()
        for target, names, line in _imports(name, path)
        for n in names
        if n.startswith("_") and not n.startswith("__") and _folder(target) != _folder(name)
    ]
    assert bad == []


def test_nothing_imports_the_package_facade() -> None:
    """``diag/__init__`` imports the api lazily for users; a module of diag importing it
    back would close the diag -> api -> ... -> diag cycle."""
    bad = [n for n, dsts in _graph().items() if "diag" in dsts and n != "diag.__main__"]
    assert bad == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short(name: str) -> None:
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{MODULES[name]} has {n} lines (at most {MAX_LINES})"


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """The checks above can fail: an engine spec importing the rules would be reported."""
    graph = _graph()
    graph["diag.engines.vllm"] = graph["diag.engines.vllm"] | {"diag.rules.engine"}
    assert any(_layer(d) > _layer(s) for s, ds in graph.items() for d in ds)
    graph["diag.rules.engine"] = graph["diag.rules.engine"] | {"diag.engines.vllm"}
    assert _cycles(graph) != []


def test_the_contract_counts_packages_and_their_inits(tmp_path: Path) -> None:
    """``import diag.a.b.c`` counts as importing the packages ``diag.a.b`` and ``diag.a``;
    ``from diag.a.b import c`` does not; a cycle between two packages' modules is a package
    cycle."""
    mod = tmp_path / "m.py"
    mod.write_text(
        "import diag.ingest.hotpath.native as n\nfrom diag.ingest.hotpath import kinds\n"
    )
    got = {t for t, _, _ in _imports("diag.facts.m", mod)}
    packages = {"diag.ingest", "diag.ingest.hotpath"}
    assert got == {"diag.ingest.hotpath.native", "diag.ingest.hotpath.kinds"} | packages
    graph = {m: set(d) for m, d in _graph().items()}
    graph["diag.ingest.hotpath.kinds"].add("diag.parsers.vllm.patterns")  # hotpath -> vllm
    assert _cycles(_packages(graph)) == []  # (one way only)
    graph["diag.parsers.vllm.patterns"].add("diag.ingest.hotpath.kinds")  # and back
    assert _cycles(graph) != [] and ["diag.ingest.hotpath", "diag.parsers.vllm"] in _cycles(
        _packages(graph)
    )


# ------------------------------------------------------------------ issue 33
COMPUTING_LAYERS = ("diag.advise", "diag.rules", "diag.facts")


def test_renderers_only_read() -> None:
    """render/ computes nothing: it imports no advice, rules or facts module. What a page
    shows is computed before it (the fleet summary: diag.summary; a run's load timeline and
    OOM figures: diag.report, diag.facts); the record types it prints come through
    diag.report and diag.summary, the classification's names from diag.batch_labels and
    number formatting from diag.figures."""
    graph = _graph()
    found = {
        src: {d for d in dsts if d.startswith(tuple(p + "." for p in COMPUTING_LAYERS))}
        for src, dsts in graph.items()
        if src.startswith("diag.render")
    }
    assert {src: sorted(d) for src, d in found.items() if d} == {}


def test_rules_read_facts_not_event_tables() -> None:
    """One fact layer: rules/ imports nothing from the event schema, ingest or the parsers;
    what they read of a run's lines is computed in facts/ (diag.facts.signals)."""
    below = ("diag.events", "diag.event_frames", "diag.ingest", "diag.parsers")
    graph = _graph()
    found = {
        src: sorted(d for d in dsts if d.startswith(below))
        for src, dsts in graph.items()
        if src.startswith("diag.rules")
    }
    assert {src: d for src, d in found.items() if d} == {}


def _dataclasses_of(package: str) -> list[type]:
    import dataclasses
    import importlib

    out = []
    for name in MODULES:
        if name == package or name.startswith(package + "."):
            mod = importlib.import_module(name)
            out += [
                obj
                for obj in vars(mod).values()
                if isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == name
            ]
    return out


def test_fact_records_are_frozen() -> None:
    """Facts are frozen once built: joins are inputs of the build, never edits after it."""
    classes = _dataclasses_of("diag.facts")
    assert len(classes) > 20
    mutable = [c.__qualname__ for c in classes if not c.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    assert mutable == []


def test_run_facts_fields_are_typed() -> None:
    import typing

    from diag.facts.record import RunFacts

    hints = typing.get_type_hints(RunFacts)
    assert all(h is not typing.Any for h in hints.values())
    assert "TraceCheck" in str(hints["trace_check"])


def test_the_pipeline_lists_every_stage_in_order() -> None:
    """diag/pipeline.py names the stages; each has one function, defined in stage order,
    typed without Any; and each stage's layer is not below the stage before it."""
    import inspect

    from diag import pipeline

    assert pipeline.STAGES == ("inputs", "ingest", "runs", "facts", "advice", "rules", "report")
    funcs = [getattr(pipeline, f"{s}_stage") for s in pipeline.STAGES]
    lines = [inspect.getsourcelines(f)[1] for f in funcs]
    assert lines == sorted(lines)
    for f in [
        *funcs,
        pipeline.analyze,
        pipeline.read_groups,
        pipeline.read_group,
        pipeline.group_stages,
        pipeline.group_facts,
        pipeline.judge,
        pipeline.judge_groups,
    ]:
        sig = inspect.signature(f)
        text = [str(p.annotation) for p in sig.parameters.values()] + [str(sig.return_annotation)]
        assert not [t for t in text if "Any" in t], f.__name__
    homes = {
        "ingest": "diag.ingest",
        "runs": "diag.facts",
        "facts": "diag.facts",
        "advice": "diag.advise",
        "rules": "diag.rules",
        "report": "diag.report",
    }
    order = [_layer(homes[s]) for s in pipeline.STAGES if s in homes]
    assert order == sorted(order)
    assert _layer("diag.pipeline") > max(order)
    assert _layer("diag.fleet") >= _layer("diag.pipeline")  # fleets use the stages


def test_every_package_is_installed() -> None:
    """pyproject.toml lists packages by name: a new package left out installs without it
    (the tool then fails only once installed, never in this tree)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "diag").rglob("__init__.py")
    }
    assert folders <= listed, sorted(folders - listed)
