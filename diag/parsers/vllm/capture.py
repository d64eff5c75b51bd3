"""vLLM capture lines: begin/end per era, tqdm progress, debug shape lines (§3/§4)."""

from __future__ import annotations

from diag.normalize.prefix import LogLine
from diag.parsers.base import Context, num, to_int
from diag.parsers.vllm.patterns import (
    CAPTURE_END,
    CG_DEBUG,
    DESC_REQS,
    DESC_TOKENS,
    DESC_UNIFORM,
    ENGINE,
    GRAPH_MEM_WARN,
    ON_DEBUG,
    PROFILING,
    PROFILING_ITEM,
    SHAPE_DEBUG,
    TQDM,
    V0_BEGIN,
    V1_BEGIN,
    first_time,
    mode_name,
    run_state,
    vllm_state,
)
from diag.parsers.vllm.runtime import first_group


def read_capture(line: LogLine, ctx: Context) -> bool:
    msg = line.msg
    opened: dict[str, str] = vllm_state(ctx).open_capture
    key = line.key
    if any(b in msg for b in V0_BEGIN):
        vllm_state(ctx).era = "v0"
        ctx.emit(
            "capture_begin", line, engine=ENGINE, phase="decode", avail_mem_gib=None, sizes=None
        )
        opened[key] = "decode"
        if any(w in msg for w in GRAPH_MEM_WARN):  # V0-6 carries V0-5's advice
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="graph_memory_warning",
                value=None,
                text=msg.strip()[:400],
            )
        return True
    if V1_BEGIN.search(msg):
        ctx.emit("capture_begin", line, engine=ENGINE, phase="all", avail_mem_gib=None, sizes=None)
        opened[key] = "all"
        return True
    m = CAPTURE_END.search(msg)
    if m:
        phase = (
            opened.pop(key, None)
            or opened.pop("", None)
            or ("decode" if vllm_state(ctx).era == "v0" else "all")
        )
        ctx.emit(
            "capture_end",
            line,
            engine=ENGINE,
            phase=phase,
            time_s=num(m.group("s")),
            mem_gib=num(m.group("gib")),
            avail_mem_gib=None,
        )
        return True
    m = SHAPE_DEBUG.search(msg)
    if m:  # V1-6: piecewise backend, one line per captured size
        ctx.emit(
            "capture_progress",
            line,
            engine=ENGINE,
            phase="mixed",
            mode="PIECEWISE",
            done=None,
            total=None,
            size=to_int(m.group(1)),
            avail_mem_gib=None,
        )
        return True
    m = ON_DEBUG.search(msg) or CG_DEBUG.search(msg)
    if m:  # V1-6' / V1-6m
        desc = m.group("desc")
        reqs = DESC_REQS.search(desc)
        uniform = DESC_UNIFORM.search(desc)
        decode = (uniform is not None and uniform.group(1) == "True") or (
            reqs is not None and reqs.group(1) != "None"
        )
        ctx.emit(
            "capture_progress",
            line,
            engine=ENGINE,
            phase="decode" if decode else "mixed",
            mode=m.group("mode"),
            done=None,
            total=None,
            size=to_int(first_group(DESC_TOKENS, desc)),
            avail_mem_gib=None,
        )
        return True
    m = PROFILING.search(msg)
    if m:  # M-1
        items = list(PROFILING_ITEM.finditer(m.group("spec")))
        names = {i.group("mode") for i in items}
        for item in items:
            ctx.emit(
                "capture_sizes",
                line,
                engine=ENGINE,
                phase=read_m1_phase(ctx, item.group("mode"), names),
                mode=item.group("mode"),
                sizes=None,
                count=to_int(item.group("n")),
                largest=to_int(item.group("largest")),
            )
        return True
    return False


def read_m1_phase(ctx: Context, mode: str, names: set[str]) -> str:
    if mode == "ENCODER":
        return "encoder"
    if mode == "PIECEWISE":
        return "mixed"
    configured = run_state(ctx).mode
    if "PIECEWISE" in names or configured in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        return "decode"
    return "mixed" if configured == "FULL" else "decode"


def read_progress(line: LogLine, ctx: Context) -> None:
    m = TQDM.search(line.msg)
    if not m:
        return
    era = vllm_state(ctx).era
    a, b = m.group("a"), m.group("b")
    phase: str
    mode: str | None
    if m.group("desc") == "Capturing CUDA graph shapes":  # V0-8 or V1-2
        phase, mode = (
            ("decode", "FULL")
            if era == "v0"
            else ("mixed", "PIECEWISE")
            if era == "v1"
            else ("all", None)
        )
    elif a is None:  # MRV2 0.13 plain desc
        phase, mode = "all", None
    elif b is None:  # MRV2 "(PIECEWISE)" / "(FULL)"
        mode = mode_name(a)
        phase = "mixed" if mode == "PIECEWISE" else "decode" if mode == "FULL" else "all"
    else:
        mode = mode_name(b) or b.upper()
        phase = (
            "decode"
            if a.strip().lower() == "decode"
            else "mixed"
            if "mixed" in a
            else a.strip().lower()
        )
    opened: dict[str, str] = vllm_state(ctx).open_capture
    if line.key not in opened and not (line.key == "" and opened):
        # the first bar of a capture opens it; a bar without a process prefix (tqdm
        # redraws lose it, and >=0.31 never has one) belongs to a capture already open
        begin = "decode" if era == "v0" else "all"
        ctx.emit("capture_begin", line, engine=ENGINE, phase=begin, avail_mem_gib=None, sizes=None)
        opened[line.key] = begin
    done, total = to_int(m.group("done")), to_int(m.group("total"))
    ctx.emit(
        "capture_progress",
        line,
        engine=ENGINE,
        phase=phase,
        mode=mode,
        done=done,
        total=total,
        size=None,
        avail_mem_gib=None,
    )
    if a is not None and mode is not None and first_time(ctx, "tqdm_mode", phase, mode):
        ctx.emit(
            "graph_mode",
            line,
            engine=ENGINE,
            mode=mode,
            origin="tqdm",
            downgraded=False,
            text=m.group("desc"),
        )
