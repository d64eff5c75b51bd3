"""Generate ``diag/engines/data/native_sites.json``: every CUDACHECK site of vLLM's C++/CUDA
sources, in every released sdist, with what the site is doing when it fails.

vLLM's custom all-reduce checks each CUDA call with a ``CUDACHECK`` macro that prints
``Failed: Cuda error FILE:LINE 'MESSAGE'`` and exits the worker: no traceback, no phase line,
often no process prefix. The printed FILE:LINE is the whole evidence of where it failed, so
this table maps it back to the function and the CUDA call at that line, version by version.
The printed LINE is the check's first line (``__LINE__`` expands where the macro's name is:
the pastes of lines 432, 455 and 164 are each a check's first line). A line is a capture
failure when, in every release where a check starts on it, that check runs while graphs are
captured (the IPC registration of the graph buffers, run as the custom
all-reduce's ``capture()`` context exits).

Usage::

    python tools/gen_native_sites.py SDIST_DIR [--check]

SDIST_DIR holds ``vllm-X.tar.gz`` files (``curl`` them from PyPI's simple index: ``pip
download`` builds an sdist's metadata, which needs torch) or their unpacked ``vllm-X/``
folders with a ``SHA256`` file of ``VERSION FILE SHA256`` lines. Only ``csrc/`` is read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "diag" / "engines" / "data" / "native_sites.json"

# What a function is doing when its check fails, read from vLLM's Python side (cited): the
# custom all-reduce's capture() context registers the graph buffers as it exits, inside the
# engine's graph capture (vllm==0.11.0:vllm/distributed/device_communicators/
# custom_all_reduce.py:187 capture -> :201 register_graph_buffers -> ops.get_graph_buffer_ipc_meta
# and ops.register_graph_buffers; the same in vllm==0.4.3:custom_all_reduce.py:208-261 and
# vllm==0.34.0). A function not listed is "either".
ROLES: dict[str, str] = {
    "get_graph_buffer_ipc_meta": "capture",
    "register_graph_buffers": "capture",
    "CustomAllreduce": "init",
    "register_buffer": "init",
    "~CustomAllreduce": "shutdown",
    "allreduce": "either",  # cudaStreamIsCapturing on every all-reduce: captured or served
}
ROLE_SOURCE = (
    "vllm==0.11.0:vllm/distributed/device_communicators/custom_all_reduce.py:187 capture() "
    "-> :201 register_graph_buffers (get_graph_buffer_ipc_meta, register_graph_buffers) as "
    "the capture context exits; vllm==0.4.3:custom_all_reduce.py:208-261; constructor and "
    "register_buffer at init, the destructor at shutdown"
)
_KEYWORDS = {"if", "for", "while", "switch", "return", "CUDACHECK", "sizeof", "catch"}
_FUNC = re.compile(r"^(?: {2})?(?:[\w:<>,\*&]+\s+)*[\*&]?(~?\w+)\s*\(")
_CALL = re.compile(r"CUDACHECK\(\s*(\w+)")


@dataclass(frozen=True)
class Check:
    file: str  # csrc/...
    first: int
    last: int
    func: str
    call: str


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.]|post", v) if x)


def _enclosing(lines: list[str], i: int) -> str:
    """The function whose body holds line i: the nearest line above at class-member or top
    indentation that opens a call-like signature."""
    for j in range(i, -1, -1):
        m = _FUNC.match(lines[j])
        if m and m.group(1) not in _KEYWORDS and not lines[j].lstrip().startswith("#"):
            return m.group(1)
    return "?"


def _checks(path: str, text: str) -> list[Check]:
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        if "CUDACHECK(" not in line or line.lstrip().startswith(("#define", "//")):
            continue
        depth, j = 0, i
        for j in range(i, min(i + 12, len(lines))):
            seg = lines[j][lines[j].index("CUDACHECK(") :] if j == i else lines[j]
            depth += seg.count("(") - seg.count(")")
            if depth <= 0:
                break
        call = _CALL.search(" ".join(lines[i : j + 1]))
        func = _enclosing(lines, i - 1)
        out.append(Check(path, i + 1, j + 1, func, call.group(1) if call else "?"))
    return out


def _open_ipc_role(text: str) -> str:
    """open_ipc_handle is capture only where register_graph_buffers alone calls it."""
    lines = text.split("\n")
    callers = {
        _enclosing(lines, i)
        for i, line in enumerate(lines)
        if "open_ipc_handle(" in line and not re.match(r"\s*char\s*\*\s*open_ipc_handle", line)
    }
    return "capture" if callers and all(ROLES.get(c) == "capture" for c in callers) else "either"


def _sources(folder: Path) -> dict[str, tuple[str, str, dict[str, str]]]:
    """version -> (sdist file, sha256, {csrc path: text}) for files using CUDACHECK."""
    shas = {}
    if (folder / "SHA256").is_file():
        for row in (folder / "SHA256").read_text().split("\n"):
            if row.strip():
                v, name, sha = row.split()
                shas[v] = (name, sha)
    out: dict[str, tuple[str, str, dict[str, str]]] = {}
    for tgz in sorted(folder.glob("vllm-*.tar.gz")):
        v = tgz.name[len("vllm-") : -len(".tar.gz")]
        files = {}
        with tarfile.open(tgz) as tar:
            for m in tar:
                rel = m.name.split("/", 1)[-1]
                if m.isfile() and rel.startswith("csrc/") and rel.endswith((".cu", ".cuh", ".h")):
                    data = tar.extractfile(m)
                    text = data.read().decode("utf-8", "replace") if data else ""
                    if "CUDACHECK" in text:
                        files[rel] = text
        out[v] = (tgz.name, hashlib.sha256(tgz.read_bytes()).hexdigest(), files)
    for d in sorted(folder.glob("vllm-*/")):
        v = d.name[len("vllm-") :]
        if v in out or v not in shas:
            continue
        files = {
            str(p.relative_to(d)): p.read_text(encoding="utf-8", errors="replace")
            for p in d.rglob("*")
            if p.is_file() and p.suffix in (".cu", ".cuh", ".h")
        }
        out[v] = (shas[v][0], shas[v][1], {k: t for k, t in files.items() if "CUDACHECK" in t})
    return out


def _ranges(versions: list[str], order: list[str]) -> str:
    """Consecutive runs of the ordered release list, as 'a-b, c'."""
    idx = sorted(order.index(v) for v in versions)
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(order[r[0]] if len(r) == 1 else f"{order[r[0]]}-{order[r[-1]]}" for r in runs)


def build(folder: Path) -> dict[str, object]:
    sources = _sources(folder)
    order = sorted(sources, key=_version_key)
    grouped: dict[tuple[Check, str], list[str]] = {}
    macro = None
    for v in order:
        for path, text in sources[v][2].items():
            if path.endswith("_test.cu"):
                continue
            m = re.search(r'#define CUDACHECK\(cmd\)[^"]*"([^"]*)"', text)
            if m and macro is None:
                line = text[: m.start()].count("\n") + 1
                macro = {"prints": m.group(1).rstrip("\\n"), "source": f"vllm=={v}:{path}:{line}"}
            open_role = _open_ipc_role(text)
            for c in _checks(path, text):
                role = open_role if c.func == "open_ipc_handle" else ROLES.get(c.func, "either")
                grouped.setdefault((c, role), []).append(v)
    sites = [
        {
            "file": c.file,
            "lines": [c.first, c.last],
            "func": c.func,
            "call": c.call,
            "role": role,
            "versions": _ranges(vs, order),
        }
        for (c, role), vs in sorted(grouped.items(), key=lambda kv: (kv[0][0].file, kv[0][0].first))
    ]
    return {
        "generated_by": "tools/gen_native_sites.py",
        "macro": macro,
        "roles": {"capture": ROLE_SOURCE},
        "sdists": [{"file": sources[v][0], "sha256": sources[v][1]} for v in order],
        "sites": sites,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sdists", type=Path)
    ap.add_argument("--check", action="store_true", help="fail if the checked-in table differs")
    args = ap.parse_args()
    table = build(args.sdists)
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.read_text(encoding="utf-8") == text
        print("native_sites.json matches" if same else "native_sites.json differs", file=sys.stderr)
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    n = len(table["sites"])  # type: ignore[arg-type]
    print(f"{OUT}: {n} sites from {len(table['sdists'])} sdists", file=sys.stderr)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
