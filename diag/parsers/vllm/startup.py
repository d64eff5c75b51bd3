"""vLLM start-up lines: era, engine config, args echoes and the graph config they set."""

from __future__ import annotations

import re
from typing import Any

from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context
from diag.parsers.configs import (
    echo_from_first_key,
    graph_dict_fragment,
    open_brackets,
    parse_config_echo,
    parse_dict,
)
from diag.parsers.vllm.patterns import (
    ARGS,
    ENGINE,
    ENGINE_CONFIG,
    NON_DEFAULT,
    Era,
    mode_name,
    new_run,
    run_state,
    vllm_state,
)


def read_note_era(line: LogLine, ctx: Context) -> None:
    """Which engine wrote this stream: both print "Graph capturing finished"."""
    msg = line.msg
    era: Era | None = None
    if (
        "Capturing the model for CUDA graphs" in msg
        or "Capturing cudagraphs for decoding" in msg
        or "# CPU blocks" in msg
        or "model weights take" in msg
        or line.proc == "VllmWorkerProcess"
    ):
        era = "v0"
    elif (
        "KV cache size:" in msg
        or "Available KV cache memory" in msg
        or "(mixed prefill-decode" in msg
        or "Capturing CUDA graphs" in msg
        or "cudagraph for shape" in msg
        or "Capturing a cudagraph on" in msg
        or "gpu_model_runner.py" in line.text
        or (line.proc or "").startswith(("EngineCore", "VllmWorker", "Worker", "APIServer"))
    ):
        era = "v1"
    if era is not None and vllm_state(ctx).era is None:
        vllm_state(ctx).era = era


#: the most header-less lines one hard-wrapped echo continues over
MAX_WRAPPED_LINES = 64
# what a piece of a wrapped echo holds (a tqdm bar or a traceback line does not continue it)
_ECHO_PIECE = re.compile(r"[=,:\[\]{}()]")
_WARNING = re.compile(r"\S+\.py:\d+: \w*Warning")  # Python's warnings print


class WrappedEchoBlock(Block):
    """An engine-config echo hard-wrapped over several lines (a terminal's or a paste's fold):
    the header-less lines after it continue it until its brackets close."""

    def __init__(self, line: LogLine) -> None:
        self.first = line
        self.text = line.msg.rstrip("\n")
        self.taken = 0

    def offer(self, line: LogLine) -> bool:
        msg = line.msg
        if (
            line.header is not None
            or self.taken >= MAX_WRAPPED_LINES
            or "%|" in msg
            or msg.lstrip().startswith(("Traceback", 'File "'))
            or _WARNING.match(msg) is not None
            or _ECHO_PIECE.search(msg) is None
        ):
            self.done = True
            return False
        self.text += msg
        self.taken += 1
        self.done = _complete(self.text)
        return True

    def finish(self, ctx: Context) -> None:
        read_engine_config(self.first, ctx, self.text)


def _complete(echo: str) -> bool:
    """Does the echo end as vLLM ends it, its brackets closed?"""
    return echo.rstrip().endswith(("}", ")")) and open_brackets(echo) == 0


def _cut_head(rest: str) -> bool:
    """Is ``rest`` (after the version) the start of " with config: ", wrapped inside it?"""
    return bool(rest.strip()) and " with config: ".startswith(rest.rstrip("\n"))


def engine_config_line(line: LogLine, ctx: Context) -> Block | None:
    """The engine-config echo line; a block where the echo does not end as vLLM ends it (from
    0.6 with ``compilation_config={...}`` or ``CompilationConfig(...)``, <=0.6.4 with ")";
    vllm==0.9.1:vllm/config.py:4652) or leaves brackets open: hard-wrapped over lines."""
    m = ENGINE_CONFIG.search(line.msg)
    cfg = (m.group("cfg") or "").rstrip() if m else ""
    head_cut = m is not None and m.group("cfg") is None and _cut_head(line.msg[m.end() :])
    if (cfg and not _complete(cfg)) or head_cut:
        return WrappedEchoBlock(line)
    read_engine_config(line, ctx)
    return None


def read_echo_fragment(line: LogLine, ctx: Context) -> bool:
    """An engine-config echo cut at its start (its "Initializing ... with config:" head lost):
    the settings it still shows, no new run (the run's start is not in the text)."""
    msg = line.msg
    if "compilation_config=" not in msg and not ("enforce_eager=" in msg and "=" in msg[:200]):
        return False
    text = echo_from_first_key(msg)
    if text is None:
        return False
    settings = flatten_settings(parse_config_echo(text))
    keys = {k for k, _ in settings}
    if "enforce_eager" not in keys and not any(k.startswith("compilation_config.") for k in keys):
        return False
    for key, value in settings:
        ctx.emit("config", line, engine=ENGINE, origin="engine_config", key=key, value=value)
    read_graph_config(line, ctx, dict(settings), vllm_state(ctx).era or "")
    return True


def read_graph_dict_fragment(line: LogLine, ctx: Context) -> bool:
    """A piece of the ``compilation_config`` dict with no ``key=`` before it (the echo's
    start cut off, or a line of it hard-wrapped): its graph settings, no new run."""
    found = graph_dict_fragment(line.msg)
    if not found:
        return False
    settings = [(f"compilation_config.{k}", _norm(k, v)) for k, v in found.items()]
    for key, value in settings:
        ctx.emit("config", line, engine=ENGINE, origin="engine_config", key=key, value=value)
    read_graph_config(line, ctx, dict(settings), vllm_state(ctx).era or "")
    return True


def read_engine_config(line: LogLine, ctx: Context, text: str | None = None) -> None:
    """The echo line (``text``: the whole echo, where it was hard-wrapped over lines)."""
    m = ENGINE_CONFIG.search(text if text is not None else line.msg)
    if not m:
        return
    eng = m.group("eng")
    if eng is None:  # "an LLM engine": V0's llm_engine.py, or 0.6.6's opt-in V1 core.py
        eng = "V1" if re.search(r"\bcore\.py:", line.text) else "V0"
    era: Era = "v1" if eng == "V1" else "v0"
    new_run(ctx, era)
    vllm_state(ctx).era = era
    ctx.emit("startup", line, engine=ENGINE, marker="engine_config")
    ctx.emit("version", line, engine=ENGINE, version=m.group("ver"))
    cfg = m.group("cfg")
    if not cfg:
        return
    cfg = cfg.rstrip()
    if cfg.endswith(")") and cfg.count(")") > cfg.count("("):
        cfg = cfg[:-1]  # <=0.6.4 closes the echo with ")"
    settings = flatten_settings(parse_config_echo(cfg))
    for key, value in settings:
        ctx.emit("config", line, engine=ENGINE, origin="engine_config", key=key, value=value)
    read_graph_config(line, ctx, dict(settings), era)


def read_graph_config(line: LogLine, ctx: Context, cfg: dict[str, Any], era: str) -> None:
    """What the config echo says about graphs: mode, capture sizes, eager."""
    eager = cfg.get("enforce_eager") is True
    mode = mode_name(cfg.get("compilation_config.cudagraph_mode"))
    text = line.msg.strip()[:300]
    if mode is None and era == "v1" and not eager:
        level = cfg.get("compilation_config.level")
        level = cfg.get("compilation_config.mode") if level is None else level
        use_cg = cfg.get("compilation_config.use_cudagraph")
        if use_cg is False or level == 0:
            mode = "NONE"
        elif use_cg is True or level == 3:
            mode = "FULL" if cfg.get("compilation_config.full_cuda_graph") is True else "PIECEWISE"
    if eager:
        mode = "NONE"
    if mode is not None:
        run_state(ctx).mode = mode
        ctx.emit(
            "graph_mode",
            line,
            engine=ENGINE,
            mode=mode,
            origin="config",
            downgraded=False,
            text=text,
        )
    if eager:
        ctx.emit(
            "graph_disabled",
            line,
            engine=ENGINE,
            reason="enforce_eager",
            text="enforce_eager=True in engine config",
        )
        return
    if mode == "NONE":
        ctx.emit(
            "graph_disabled",
            line,
            engine=ENGINE,
            reason="mode_none",
            text="cudagraph_mode NONE in engine config",
        )
        return
    sizes = cfg.get("compilation_config.cudagraph_capture_sizes")
    if isinstance(sizes, list) and sizes:
        if era == "v0":
            phase, set_mode = "decode", "FULL"
        elif mode == "FULL_DECODE_ONLY":
            phase, set_mode = "decode", "FULL"
        else:
            phase, set_mode = "mixed", "FULL" if mode == "FULL" else "PIECEWISE"
        ctx.emit(
            "capture_sizes",
            line,
            engine=ENGINE,
            phase=phase,
            mode=set_mode,
            sizes=sizes,
            count=len(sizes),
            largest=max(sizes),
        )


def read_args(line: LogLine, ctx: Context) -> None:
    msg = line.msg
    m = NON_DEFAULT.search(msg)
    if m:
        origin, args = "non_default_args", parse_dict(m.group("args"))
    else:
        a = ARGS.search(msg)
        if not a:
            return
        origin = "args"
        inner = a.group("args")[len("Namespace(") :].rstrip()
        args = parse_config_echo(inner[:-1] if inner.endswith(")") else inner)
    new_run(ctx, vllm_state(ctx).era)
    ctx.emit("startup", line, engine=ENGINE, marker="args")
    settings = flatten_settings(args)
    for key, value in settings:
        ctx.emit("config", line, engine=ENGINE, origin=origin, key=key, value=value)
    if dict(settings).get("enforce_eager") is True:
        ctx.emit(
            "graph_disabled",
            line,
            engine=ENGINE,
            reason="enforce_eager",
            text=f"enforce_eager=True in {origin.replace('_', ' ')}",
        )


def _norm(key: str, value: Any) -> Any:
    leaf = key.rsplit(".", 1)[-1]
    if leaf == "cudagraph_mode":
        return mode_name(value) or value
    if leaf == "cudagraph_capture_sizes" and isinstance(value, list):
        ints = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        return sorted(set(ints))
    return value


def flatten_settings(args: dict[str, Any]) -> list[tuple[str, Any]]:
    """Top-level names as printed; compilation config keys as ``compilation_config.<key>``."""
    out: list[tuple[str, Any]] = []
    for key, value in args.items():
        if key == "__call__":
            continue
        if key == "compilation_config" and isinstance(value, dict):
            for ck, cv in value.items():
                if ck != "__call__":
                    out.append((f"compilation_config.{ck}", _norm(ck, cv)))
        else:
            out.append((key, _norm(key, value)))
    return out
