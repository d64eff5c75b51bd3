"""Generate ``diag/engines/data/raise_atlas.json``: the engines' own error messages, per raise site.

Read from released packages with :mod:`ast`, never typed by hand: every ``raise X(...)``,
``assert cond, msg`` and ``logger.error/exception/warning(...)`` in the graph-capture and
graph-mode code of vLLM and SGLang (and their plugins, given as unpacked source), plus a set of
non-capture sites (weight loading, tokenizer, request validation, KV cache sizing, ports).

A message becomes a template: its literal parts, with every f-string field, ``%`` conversion
and ``.format`` field a wildcard. Each site gets

  capture   true when the site is in capture/graph-mode code (a capture-dedicated module, a
            function whose name says capture/graph, a message that names the graph mode, or
            anywhere in the package a branch opened by a "stream is capturing" test such as
            ``if torch.cuda.is_current_stream_capturing():`` / ``assert not capturing(), msg``:
            raised only while capturing, class unsupported_op unless it names another) AND no
            site outside that code prints the same template: the message alone then says
            "capture". FlashInfer and torch (beyond torch/cuda/graphs.py) are read for their
            capture-guarded sites only. Logger warnings are kept (``level: warning``) but are
            capture evidence only where their words say a capture failed (``FAILED_CAPTURE``:
            a wrapper that catches the failure, warns and serves that size eagerly, as
            vllm-omni's model-side graph wrappers do); other warnings in capture code are
            mostly a fallback by configuration, not a failure.
  class     one rule over the message and the file (``_judge``): memory -> oom, a capture/stream
            state -> stream_capture_invalid, not supported -> unsupported_op, collectives /
            all-reduce files -> distributed, the rest other.
  cause     the narrower cause of ``diag/rules/causes.py`` where it fits (custom_all_reduce for
            the custom all-reduce modules, compile for the compilation backends), else the class.
  source    ``package==version:path:line``.

Too generic templates (less than 12 characters of literal text) and raises of classes no log
prints as an exception (``raise Fallback(...)``, caught inside the engine) are left out and
counted. A site's class is the signature table's (errors.yaml) where a row there names one for
its message: one vocabulary. The stored atlas was made from (ROOT = the unpacked ``*.py`` of
each; vllm-ascend's PyPI release is an sdist whose build does not finish here, so its tag
v0.23.0 = 5cb98caa is read; vllm-gaudi has no PyPI release: its repository at 091bbadd)::

    pip download --no-deps vllm==0.34.0 vllm==0.11.0 sglang==0.5.23 sglang==0.5.7 sglang==0.5.3 \
        vllm-omni==0.30.0 \
        flashinfer-python==0.7.4 torch==2.14.1
    python tools/gen_raise_atlas.py \
        --pkg vllm==0.34.0=/x/vllm --pkg vllm==0.11.0=/x/v011 --pkg sglang==0.5.23=/x/sglang \
        --pkg sglang==0.5.7=/x/sg057 --pkg sglang==0.5.3=/x/sg053 \
        --pkg vllm-ascend==0.23.0=/x/ascend \
        --pkg vllm-gaudi==github:vllm-project/vllm-gaudi@091bbadd=/x/gaudi \
        --pkg vllm-omni==0.30.0=/x/omni \
        --pkg flashinfer-python==0.7.4=/x/flashinfer --pkg torch==2.14.1=/x/torch \
        --wheel /x/vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl --wheel ... \
        > diag/engines/data/raise_atlas.json
    python tools/gen_raise_atlas.py ... --check   # exit 1 when the stored rows differ

CI has no wheels, so the test (tests/test_raise_atlas.py) checks the stored rows against their
stamp (``sha256``) and pastes every site; ``--check`` is the by-hand comparison with the wheels.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "diag" / "engines" / "data" / "raise_atlas.json"

# ---------------------------------------------------------------- where capture code is
# (package, glob under the package root, mode): "all" every site of the module is capture
# code; "graph" only sites in a function whose name says capture/graph, or whose message
# names the graph mode; "plain" a non-capture module (weight loading, tokenizer, requests...).
SCOPES: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (
        ("vllm/compilation/cuda_graph.py", "all"),
        ("vllm/compilation/piecewise_backend.py", "all"),
        ("vllm/compilation/cuda_piecewise_backend.py", "all"),
        ("vllm/compilation/breakable_cudagraph.py", "all"),
        ("vllm/compilation/cudagraph_pool.py", "all"),
        ("vllm/compilation/monitor.py", "all"),
        ("vllm/compilation/base_static_graph.py", "all"),
        ("vllm/compilation/backends.py", "graph"),
        ("vllm/compilation/decorators.py", "graph"),
        ("vllm/compilation/wrapper.py", "graph"),
        ("vllm/v1/cudagraph_dispatcher.py", "all"),
        ("vllm/v1/worker/gpu/cudagraph_utils.py", "all"),
        ("vllm/v1/worker/gpu/spec_decode/*cudagraph*.py", "all"),
        ("vllm/v1/worker/gpu/spec_decode/*/cudagraph_utils.py", "all"),
        ("vllm/v1/worker/encoder_cudagraph.py", "all"),
        ("vllm/v1/worker/gpu/model_runner.py", "graph"),
        ("vllm/v1/worker/gpu_model_runner.py", "graph"),
        ("vllm/v1/worker/gpu_worker.py", "graph"),
        ("vllm/v1/worker/gpu/attn_utils.py", "graph"),
        ("vllm/v1/worker/utils.py", "graph"),
        ("vllm/v1/spec_decode/eagle.py", "graph"),
        ("vllm/v1/worker/gpu/spec_decode/*.py", "graph"),
        ("vllm/v1/worker/gpu/spec_decode/*/*.py", "graph"),
        ("vllm/v1/attention/backend.py", "graph"),
        ("vllm/v1/attention/backends/*.py", "graph"),
        ("vllm/v1/attention/backends/*/*.py", "graph"),
        ("vllm/config/compilation.py", "graph"),
        ("vllm/config/vllm.py", "graph"),
        ("vllm/distributed/device_communicators/custom_all_reduce.py", "graph"),
        ("vllm/distributed/device_communicators/quick_all_reduce.py", "graph"),
        ("vllm/distributed/device_communicators/pynccl.py", "graph"),
        ("vllm/distributed/device_communicators/cuda_communicator.py", "graph"),
        ("vllm/distributed/parallel_state.py", "graph"),
        ("vllm/model_executor/model_loader/*.py", "plain"),
        ("vllm/transformers_utils/tokenizer*.py", "plain"),
        ("vllm/tokenizers/*.py", "plain"),
        ("vllm/v1/engine/input_processor.py", "plain"),
        ("vllm/v1/engine/processor.py", "plain"),
        ("vllm/sampling_params.py", "plain"),
        ("vllm/v1/core/kv_cache_utils.py", "plain"),
        ("vllm/utils/network_utils.py", "plain"),
    ),
    "sglang": (
        ("sglang/srt/model_executor/runner/*graph_runner.py", "all"),
        ("sglang/srt/model_executor/runner/base_runner.py", "graph"),
        ("sglang/srt/model_executor/runner_backend/*.py", "all"),
        ("sglang/srt/model_executor/runner_backend_utils/*.py", "all"),
        ("sglang/srt/model_executor/runner_backend_utils/*/*.py", "all"),
        ("sglang/srt/model_executor/runner_utils/capture_mode.py", "all"),
        ("sglang/srt/model_executor/runner_utils/prefill_graph.py", "all"),
        ("sglang/srt/model_executor/cuda_graph_runner.py", "all"),
        ("sglang/srt/model_executor/piecewise_cuda_graph_runner.py", "all"),
        ("sglang/srt/model_executor/cpu_graph_runner.py", "all"),
        ("sglang/srt/model_executor/cuda_graph_config.py", "graph"),
        ("sglang/srt/model_executor/model_runner.py", "graph"),
        ("sglang/srt/compilation/*piecewise_backend.py", "all"),
        ("sglang/srt/compilation/*.py", "graph"),
        ("sglang/srt/speculative/*cuda_graph_runner.py", "all"),
        ("sglang/srt/speculative/*.py", "graph"),
        ("sglang/srt/hardware_backend/npu/graph_runner/*.py", "all"),
        ("sglang/srt/distributed/device_communicators/custom_all_reduce*.py", "graph"),
        ("sglang/srt/distributed/device_communicators/pynccl.py", "graph"),
        ("sglang/srt/distributed/parallel_state.py", "graph"),
        ("sglang/srt/layers/attention/*.py", "graph"),
        ("sglang/srt/server_args.py", "graph"),
        ("sglang/srt/model_loader/*.py", "plain"),
        ("sglang/srt/managers/tokenizer_manager.py", "plain"),
        ("sglang/srt/utils/hf_transformers_utils.py", "plain"),
        ("sglang/srt/utils/network.py", "plain"),
        ("sglang/srt/mem_cache/allocation.py", "plain"),
    ),
    "vllm-ascend": (
        ("vllm_ascend/compilation/acl_graph.py", "all"),
        ("vllm_ascend/compilation/*.py", "graph"),
        ("vllm_ascend/worker/model_runner_v1.py", "graph"),
        ("vllm_ascend/worker/*.py", "graph"),
        ("vllm_ascend/spec_decode/*.py", "graph"),
        ("vllm_ascend/attention/*.py", "graph"),
        ("vllm_ascend/platform.py", "graph"),
    ),
    # torch: its graph API, and (by CAPTURING) the capture-guarded raises anywhere; Inductor's
    # cudagraph_trees internals are assertions of its own state, not a user's evidence
    "torch": (("torch/cuda/graphs.py", "all"),),
    "vllm-gaudi": (
        ("vllm_gaudi/v1/worker/hpu_model_runner.py", "graph"),
        ("vllm_gaudi/v1/worker/hpu_worker.py", "graph"),
        ("vllm_gaudi/platform.py", "graph"),
        ("vllm_gaudi/extension/*.py", "graph"),
    ),
    # vllm-omni: model-side graph wrappers (speech, codec, DiT models) capture their own graphs
    # in functions that say so; its NPU platform and runners
    "vllm-omni": (
        ("vllm_omni/model_executor/models/*/*.py", "graph"),
        ("vllm_omni/platforms/*/*.py", "graph"),
        ("vllm_omni/platforms/*/*/*.py", "graph"),
        ("vllm_omni/worker/*.py", "graph"),
        ("vllm_omni/worker_v2/*/*.py", "graph"),
    ),
}
GRAPH_FUNC = re.compile(r"captur|cudagraph|cuda_graph|graph|register_graph_buffers|warmup_hpu")
GRAPH_WORDS = re.compile(
    r"(?i)cuda[ _-]?graph|cudagraph|(?:graph|stream)[ _-]?captur|captur\w*[ _-](?:graph|stream)|"
    r"capture[ _-](?:size|bs|batch)|piecewise|acl[ _-]?graph|npu[ _-]?graph|hpu[ _-]?graph|"
    r"graph mode|FULL_AND_PIECEWISE|FULL_DECODE_ONLY|enforce[_-]eager"
)
# a call that asks "is a stream capturing now?" (torch's and the engines' own helpers): a raise
# in the branch it opens (or an ``assert not <it>``) is raised only while capturing, wherever the
# module is (attention backends, MoE layers, FlashInfer): its site is capture evidence
CAPTURING = re.compile(
    r"^_?(?:is_current_stream_capturing|is_capturing|capturing|is_cuda_graph_capturing|"
    r"is_cuda_graph_capture_active|is_stream_capturing|get_is_capture_mode)$"
)
ADVICE = re.compile(r"CAPTURE_FAILED_MSG$")
MIN_ADVICE = 20
EXC_NAME = re.compile(r"(?:Error|Exception|Failure|Interrupt|Exit)$")
LOG_LEVELS = {"error": "error", "exception": "error", "critical": "error", "warning": "warning"}
MIN_LITERAL = 12  # below this a template is too generic to be anyone's evidence
#: a warning whose words say a capture failed ("Failed to capture ... graph for size=%d",
#: "... graph capture failed for %s; ... eager ... from now on"): the engine goes on without it
FAILED_CAPTURE = re.compile(r"(?i)\bfail\w*\b[^.;]{0,40}\bcaptur|\bcaptur\w*\b[^.;]{0,40}\bfail")
MIN_CAPTURE_LITERAL = 24  # a capture mark from a message that does not name the graph itself
SKIP_DIRS = re.compile(r"(?:^|/)(?:tests?|testing|benchmarks?|examples)/")
WILD = "\x00"  # the wildcard's place while a template is built


@dataclass
class Site:
    template: str  # literal text, "{}" for each wildcard (literal braces doubled)
    parts: list[str]  # the literal parts between wildcards
    exc_type: str | None  # the raised class (AssertionError for assert), None for a log call
    level: str  # raise | error | warning | advice (a line of a capture-failure advice block)
    error_class: str
    cause: str
    capture: bool
    scope: str  # capture_code (graph-capture / graph-mode code) | outside (weight loading, ...)
    func: str
    source: str
    package: str
    path: str = ""
    line: int = 0
    also: list[str] = field(default_factory=list)  # the same template at other sites/versions


# ---------------------------------------------------------------- message templates
def _fmt_parts(fmt: str, percent: bool) -> str:
    """A %-format or str.format string with its conversions as wildcards."""
    if percent:
        return re.sub(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrfgixXeEcu%]", _pct, fmt)
    return (
        re.sub(r"\{[^{}]*\}", WILD, fmt.replace("{{", "\x01").replace("}}", "\x02"))
        .replace("\x01", "{")
        .replace("\x02", "}")
    )


def _pct(m: re.Match[str]) -> str:
    return "%" if m.group(0) == "%%" else WILD


def _text(node: ast.AST | None, names: dict[str, ast.AST], depth: int = 0) -> str | None:
    """The message an expression builds, wildcards for what is computed (None: nothing known)."""
    if node is None or depth > 6:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            else:
                out.append(WILD)
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _text(node.left, names, depth + 1), _text(node.right, names, depth + 1)
        return (a if a is not None else WILD) + (b if b is not None else WILD)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        fmt = _text(node.left, names, depth + 1)
        return _fmt_parts(fmt, True) if fmt is not None else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "format":
            fmt = _text(node.func.value, names, depth + 1)
            return _fmt_parts(fmt, False) if fmt is not None else None
        if node.func.attr == "join":
            return WILD
    if isinstance(node, ast.Name) and node.id in names:
        return _text(names[node.id], names, depth + 1)
    return WILD


def _parts(msg: str) -> list[str]:
    out, cur = [], []
    for ch in msg:
        if ch == WILD:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    # collapse adjacent wildcards; a template keeps its first line's worth of structure
    return [p for i, p in enumerate(out) if p or i in (0, len(out) - 1)]


# ---------------------------------------------------------------- class, cause
def _judge(text: str, path: str, exc: str | None) -> tuple[str, str]:
    t = text.lower()
    if exc == "NotImplementedError":
        return "unsupported_op", "unsupported_op"
    if re.search(
        r"out of memory|\boom\b|not enough memory|insufficient memory|memory is not enough", t
    ):
        return "oom", "oom"
    ar = re.search(r"custom_all_reduce|quick_all_reduce|custom_ar", path)
    if ar:
        return "distributed", "custom_all_reduce"
    # the capture itself invalidated (not a Python stream variable left unset: that is other)
    if re.search(
        r"capture (?:is |was |has been )?invalid|invalidated|not (?:currently )?capturing|"
        r"capture status|capturing detected at an inappropriate time",
        t,
    ):
        return "stream_capture_invalid", "stream_capture_invalid"
    if re.search(
        r"not (?:yet )?supported|unsupported|does not support|doesn't support|do not support|"
        r"not implemented|is only supported|only supports?\b|supports? only|incompatible with|"
        r"not compatible with|cannot be used with",
        t,
    ):
        return "unsupported_op", "unsupported_op"
    if re.search(r"\bnccl\b|all[_-]?reduce|pynccl|\bcollective", t) or "pynccl" in path:
        return "distributed", "distributed"
    if re.search(r"compilation/(?:backends|decorators|wrapper|compiler_interface)", path):
        return "other", "compile"
    return "other", "other"


# ---------------------------------------------------------------- the walk
class _Walker(ast.NodeVisitor):
    def __init__(self, label: str, rel: str, mode: str) -> None:
        self.label, self.rel, self.mode = label, rel, mode
        self.stack: list[str] = []
        self.names: list[dict[str, ast.AST]] = [{}]
        self.found: list[tuple[str, str | None, str, str, int, bool, bool]] = []
        self.guard = 0  # how many capture-only branches enclose the node being visited

    def _func(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.names.append({})
        guard, self.guard = self.guard, 0  # a def under a branch does not run there
        self.generic_visit(node)
        self.guard = guard
        self.names.pop()
        self.stack.pop()

    def visit_If(self, node: ast.If) -> None:
        """The branch a capturing test opens is capture-only (``if not capturing():`` its else)."""
        self.visit(node.test)
        side = _capture_side(node.test)
        for branch, name in ((node.body, "body"), (node.orelse, "orelse")):
            self.guard += side == name
            for child in branch:
                self.visit(child)
            self.guard -= side == name

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _func  # type: ignore[assignment]

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):
                self.names[-1][t.id] = node.value
                if not self.stack and ADVICE.search(t.id):
                    self._advice(node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        """``msg += "..."``: the message grows where the source grows it (in visiting order)."""
        t = node.target
        if isinstance(t, ast.Name) and isinstance(node.op, ast.Add) and t.id in self.names[-1]:
            self.names[-1][t.id] = ast.BinOp(self.names[-1][t.id], ast.Add(), node.value)
        self.generic_visit(node)

    def _advice(self, node: ast.Assign) -> None:
        """An engine's capture-failure advice block (SGLang's ``CUDA_GRAPH_CAPTURE_FAILED_MSG``,
        printed only under a failed capture): each line its own site."""
        text = _text(node.value, self._scope())
        if text is None:
            return
        text = _fmt_parts(text.replace(WILD, "{}"), False)  # it is filled with .format
        for no, line in enumerate(text.split("\n")):
            if len(line.replace(WILD, "").strip()) >= MIN_ADVICE:
                self.found.append((line, None, "advice", "", node.value.lineno + no, True, False))

    def _scope(self) -> dict[str, ast.AST]:
        """The names a message may be built from: the function's, then the module's."""
        return {k: v for d in (self.names[0], self.names[-1]) for k, v in d.items()}

    def _add(self, msg: str | None, exc: str | None, level: str, line: int) -> None:
        if msg is None:
            return
        func = ".".join(self.stack)
        in_graph = self.mode == "all" or (
            self.mode == "graph" and (GRAPH_FUNC.search(func.lower()) or GRAPH_WORDS.search(msg))
        )
        guarded = self.guard > 0
        self.found.append((msg, exc, level, func, line, bool(in_graph) or guarded, guarded))

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            name = _callee(exc.func)
            arg = exc.args[0] if exc.args else None
            self._add(_text(arg, self._scope()), name, "raise", node.lineno)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            # ``assert not capturing(), msg`` fails only while a stream captures
            fails_capturing = _capture_side(node.test) == "orelse"
            self.guard += fails_capturing
            self._add(_text(node.msg, self._scope()), "AssertionError", "raise", node.lineno)
            self.guard -= fails_capturing
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr in LOG_LEVELS
            and isinstance(f.value, ast.Name)
            and f.value.id in ("logger", "log", "_logger", "LOGGER")
            and node.args
        ):
            msg = _text(node.args[0], self._scope())
            if msg is not None and len(node.args) > 1:
                msg = _fmt_parts(msg, True)  # logger.x("... %d ...", value): lazy %-formatting
            self._add(msg, None, LOG_LEVELS[f.attr], node.lineno)
        self.generic_visit(node)


def _capture_side(test: ast.AST) -> str | None:
    """Which branch of ``if test`` runs only while capturing: "body" for ``capturing()`` (alone
    or and-ed), "orelse" for ``not capturing()``, None for any other test."""
    if isinstance(test, ast.Call):
        name = _callee(test.func)
        return "body" if name is not None and CAPTURING.match(name) else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return "orelse" if _capture_side(test.operand) == "body" else None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return "body" if any(_capture_side(v) == "body" for v in test.values) else None
    return None


def _callee(f: ast.AST) -> str | None:
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _mode(package: str, rel: str) -> str | None:
    for pat, mode in SCOPES.get(package, ()):
        if fnmatch(rel, pat):
            return mode
    return None


def scan(label: str, root: Path) -> tuple[list[Site], list[tuple[str, ...]], int, int]:
    """Sites of one package: (in-scope sites, every template's parts anywhere, how many were
    too generic, how many raise no exception class a log prints)."""
    package = label.split("==", 1)[0]
    sites: list[Site] = []
    everywhere: list[tuple[str, ...]] = []
    generic = internal = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if SKIP_DIRS.search(rel):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        mode = _mode(package, rel)
        w = _Walker(label, rel, mode or "none")
        w.visit(tree)
        for msg, exc, level, func, line, in_graph, guarded in w.found:
            parts = _parts(msg.strip())
            if mode is None and guarded and level != "warning":
                pass  # a capture-only branch outside the scoped modules: its own site
            elif mode is None or not in_graph:
                everywhere.append(tuple(parts))
            if (mode is None and not (guarded and level != "warning")) or (
                mode not in (None, "plain") and not in_graph
            ):
                continue
            if mode == "plain" and GRAPH_WORDS.search(msg):
                continue
            if mode == "plain" and guarded:
                continue  # a capture branch in a non-capture module: neither side's evidence
            literal = "".join(parts)
            if len(literal.strip()) < MIN_LITERAL or max(len(p) for p in parts) < 8:
                generic += 1
                continue
            if level == "raise" and not EXC_NAME.search(exc or ""):
                internal += 1  # raise Fallback(...), raise self._error(...): caught inside the
                continue  # engine or not an exception class a log prints by this name
            capture = mode != "plain" and (level != "warning" or bool(FAILED_CAPTURE.search(msg)))
            if (
                capture
                and len(literal.strip()) < MIN_CAPTURE_LITERAL
                and not GRAPH_WORDS.search(msg)
            ):
                capture = False  # "Invalid forward mode": too short to say capture on its own
            cls, cause = _judge(literal, rel, exc)
            if guarded and cls == "other":
                # an op that refuses to run while a stream captures (torch's own such checks
                # are unsupported_op in errors.yaml: one vocabulary)
                cls, cause = "unsupported_op", "unsupported_op"
            sites.append(
                Site(
                    template=WILD.join(parts)
                    .replace("{", "{{")
                    .replace("}", "}}")
                    .replace(WILD, "{}"),
                    parts=parts,
                    exc_type=exc,
                    level=level,
                    error_class=cls,
                    cause=cause,
                    capture=capture,
                    scope="outside" if mode == "plain" else "capture_code",
                    func=func,
                    source=f"{label}:{rel}:{line}",
                    package=package,
                    path=rel,
                    line=line,
                )
            )
    return sites, everywhere, generic, internal


def _collides(parts: list[str], others: set[tuple[str, ...]]) -> bool:
    """Whether a template outside capture code prints the same text (same literal skeleton)."""
    return tuple(parts) in others


def _table_class(s: Site) -> tuple[str, str]:
    """One vocabulary: where a row of the signature table (errors.yaml: hand rows, runtime
    codes) names a class for the site's message, that class is the site's."""
    sys.path.insert(0, str(OUT.parents[3]))
    from diag.engines.errors import judge

    text = "7".join(s.parts)
    v = judge(f"{s.exc_type}: {text}" if s.exc_type else text)
    if v.signature is not None and not v.signature.startswith("atlas:"):
        if v.error_class != s.error_class:
            return v.error_class, v.error_class if s.cause == s.error_class else s.cause
    return s.error_class, s.cause


def build(pkgs: list[str], wheels: list[str]) -> dict[str, object]:
    all_sites: list[Site] = []
    outside: set[tuple[str, ...]] = set()
    generic = internal = 0
    for arg in pkgs:
        label, _, root = arg.rpartition("=")
        sites, everywhere, g, i = scan(label, Path(root))
        all_sites += sites
        outside |= set(everywhere)
        generic += g
        internal += i
    merged: dict[tuple[str, tuple[str, ...]], Site] = {}
    for s in all_sites:
        if s.capture and _collides(s.parts, outside):
            s.capture = False  # the same words are printed outside capture code too
        key = (s.package, tuple(s.parts), s.level == "warning")
        if key in merged:
            first = merged[key]
            first.capture = first.capture and s.capture
            if s.source not in first.also and s.source != first.source:
                first.also.append(s.source)
            continue
        merged[key] = s
    rows = []
    for s in merged.values():
        s.error_class, s.cause = _table_class(s)
        d = asdict(s)
        d.pop("package"), d.pop("path"), d.pop("line")
        d["class"] = d.pop("error_class")
        d["type"] = d.pop("exc_type")
        rows.append(d)
    rows.sort(key=lambda r: (not r["capture"], r["source"]))
    body = json.dumps(rows, sort_keys=True).encode()
    return {
        "generated_by": "tools/gen_raise_atlas.py",
        "packages": [p.rpartition("=")[0] for p in pkgs],
        "wheels": [
            {"file": Path(w).name, "sha256": hashlib.sha256(Path(w).read_bytes()).hexdigest()}
            for w in wheels
        ],
        "left_out_generic": generic,
        "left_out_internal": internal,
        "sha256": hashlib.sha256(body).hexdigest(),
        "sites": rows,
    }


def _dump(data: dict[str, object]) -> str:
    """JSON with one site a line (diffs of a regenerated atlas stay readable)."""
    head = {k: v for k, v in data.items() if k != "sites"}
    rows = ",\n".join("  " + json.dumps(r, sort_keys=True) for r in data["sites"])  # type: ignore[attr-defined]
    return json.dumps(head, indent=1, sort_keys=True)[:-2] + ',\n "sites": [\n' + rows + "\n ]\n}\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pkg", action="append", default=[], help="LABEL=ROOT (package==version=dir)")
    ap.add_argument("--wheel", action="append", default=[], help="a wheel/sdist file to hash")
    ap.add_argument("--check", action="store_true", help="compare with the stored atlas")
    a = ap.parse_args()
    data = build(a.pkg, a.wheel)
    text = _dump(data)
    if a.check:
        stored = json.loads(OUT.read_text(encoding="utf-8"))
        same = stored.get("sha256") == data["sha256"]
        print(
            f"raise_atlas.json: {'matches' if same else 'DIFFERS from'} the packages given "
            f"({len(data['sites'])} sites generated, {len(stored.get('sites', []))} stored)"  # type: ignore[arg-type]
        )
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
