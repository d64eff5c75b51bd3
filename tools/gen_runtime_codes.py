"""Generate ``diag/engines/data/runtime_codes.json``: every error code of the accelerator runtimes.

The table is read from released packages, never typed by hand, so it cannot drift from what
the libraries print:

  cuda  ``enum cudaError`` of ``include/driver_types.h`` (names, numbers, header lines) and
        the text ``cudaGetErrorString`` returns, called through ctypes on the wheel's
        ``libcudart.so`` (a lookup: no GPU needed). Several wheels may be given; a code is
        cited from the newest that has it.
  cu    the driver API's ``CUresult`` names of the newest wheel's ``include/cuda.h`` (no texts:
        those are in ``libcuda``, which no wheel ships).
  hip   ``enum hipError_t`` of ROCm/HIP ``include/hip/hip_runtime_api.h`` and the strings of
        ``ihipGetErrorString`` in ROCm/clr ``hipamd/src/hip_error.cpp`` (read from the source:
        the ROCm runtime is not on PyPI).
  nccl  ``ncclResult_t`` of the wheel's ``include/nccl.h``, ``ncclGetErrorString`` through ctypes.
  acl   the ``ACL_ERROR_*`` codes of torch-npu's bundled CANN headers
        (``include/acl/error_codes/rt_error_codes.h``, ``include/acl/acl_base_rt.h``) and the
        text torch_npu prints after ``[Error]:`` (``NPUErrorCodes.h``), where it has one.

Success codes are left out (they are not errors). The class and capture mark of each code
follow one rule (``_judge``): allocation failures are ``oom``, stream-capture codes
``stream_capture_invalid`` (and capture-only), not-supported codes ``unsupported_op``, NCCL
results ``distributed``, the rest ``other``. Run (paths are the unpacked wheels / checked-out repositories)::

    python tools/gen_runtime_codes.py \
        --cuda nvidia-cuda-runtime-cu12==12.9.79=/x/cu12/nvidia/cuda_runtime \
        --cuda nvidia-cuda-runtime==13.0.96=/x/cu13/nvidia/cu13 \
        --hip-header github:ROCm/HIP@c5e11fcac=/m/HIP \
        --hip-strings github:ROCm/clr@f9f995c6d=/m/clr \
        --nccl nvidia-nccl-cu13==2.30.7=/x/nccl/nvidia/nccl \
        --acl torch-npu==2.14.0=/x/torch_npu/torch_npu > diag/engines/data/runtime_codes.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Code:
    runtime: str
    code: int
    name: str
    message: str | None
    source: str


def _split(arg: str) -> tuple[str, Path]:
    label, _, path = arg.rpartition("=")
    return label, Path(path)


def _header_lines(text: str, rx: re.Pattern[str]) -> dict[str, tuple[int, int]]:
    """name -> (value, 1-based line) for every enumerator/define the pattern finds."""
    out: dict[str, tuple[int, int]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        m = rx.search(line)
        if m and m.group("name") not in out:
            out[m.group("name")] = (int(m.group("value")), no)
    return out


def cuda(wheels: list[str]) -> list[Code]:
    enum = re.compile(r"^\s*,?\s*(?P<name>cudaError\w+)\s*=\s*(?P<value>\d+)")
    found: dict[int, Code] = {}
    for arg in wheels:  # later wheels override: the newest citation wins
        label, root = _split(arg)
        header = (root / "include" / "driver_types.h").read_text()
        lib_path = next((root / "lib").glob("libcudart.so.*"))
        lib = ctypes.CDLL(str(lib_path))
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        for name, (value, line) in _header_lines(header, enum).items():
            msg = lib.cudaGetErrorString(value).decode()
            src = f"{label}:include/driver_types.h:{line}; {lib_path.name} cudaGetErrorString({value})"
            found[value] = Code("cuda", value, name, msg, src)
    return [found[k] for k in sorted(found)]


def cu(arg: str) -> list[Code]:
    """The driver API's ``CUresult`` names (``include/cuda.h``): printed by name only here, its
    texts come from ``libcuda``, which no wheel ships."""
    label, root = _split(arg)
    enum = re.compile(r"^\s*(?P<name>CUDA_ERROR_\w+)\s*=\s*(?P<value>\d+)")
    header = (root / "include" / "cuda.h").read_text()
    return [
        Code("cu", value, name, None, f"{label}:include/cuda.h:{line}")
        for name, (value, line) in sorted(_header_lines(header, enum).items(), key=lambda i: i[1])
    ]


def hip(header_arg: str, strings_arg: str) -> list[Code]:
    hlabel, hroot = _split(header_arg)
    slabel, sroot = _split(strings_arg)
    header = (hroot / "include" / "hip" / "hip_runtime_api.h").read_text()
    enum = re.compile(r"^\s*(?P<name>hipError\w+)\s*=\s*(?P<value>\d+)")
    values = _header_lines(header, enum)
    cpp = (sroot / "hipamd" / "src" / "hip_error.cpp").read_text()
    body = cpp[cpp.index("ihipGetErrorString") :]
    case = re.compile(r'case (?P<name>hip\w+):\s*return "(?P<msg>[^"]*)";')
    lines = {m.start(): m for m in case.finditer(body)}
    offset = cpp.count("\n", 0, cpp.index("ihipGetErrorString")) + 1
    out: dict[int, Code] = {}
    for pos, m in lines.items():
        name = m.group("name")
        if name not in values or name == "hipSuccess":
            continue
        value, hline = values[name]
        sline = offset + body.count("\n", 0, pos)
        src = (
            f"{hlabel}:include/hip/hip_runtime_api.h:{hline}; "
            f"{slabel}:hipamd/src/hip_error.cpp:{sline} ihipGetErrorString"
        )
        out.setdefault(value, Code("hip", value, name, m.group("msg"), src))
    return [out[k] for k in sorted(out)]


def nccl(arg: str) -> list[Code]:
    label, root = _split(arg)
    header = (root / "include" / "nccl.h").read_text()
    enum = re.compile(r"(?P<name>nccl(?!Success|NumResults)[A-Z]\w+)\s*=\s*(?P<value>\d+)")
    head = header[: header.index("ncclResult_t;")]
    lib = ctypes.CDLL(str(next((root / "lib").glob("libnccl.so*"))))
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    out = []
    for name, (value, line) in _header_lines(head, enum).items():
        msg = lib.ncclGetErrorString(value).decode()
        src = f"{label}:include/nccl.h:{line}; libnccl.so.2 ncclGetErrorString({value})"
        out.append(Code("nccl", value, name, msg, src))
    return out


def acl(arg: str) -> list[Code]:
    label, root = _split(arg)
    inc = root / "include"
    files = ("acl/error_codes/rt_error_codes.h", "acl/acl_base_rt.h")
    rx = re.compile(
        r"(?:#define\s+|static const int\s+)(?P<name>ACL_ERROR_\w+)\s*=?\s*(?P<value>\d{6})\b"
    )
    codes = "torch_npu/csrc/core/npu/NPUErrorCodes.h"
    table = (inc / codes).read_text()
    said: dict[int, tuple[str, int]] = {}
    for m in re.finditer(r'\{(\d{6}),\s*"((?:[^"\\]|\\.)*)', table):
        first = m.group(2).split("\\n", 1)[0].strip()
        said[int(m.group(1))] = (first, table.count("\n", 0, m.start()) + 1)
    out: dict[int, Code] = {}
    for rel in files:
        for name, (value, line) in _header_lines((inc / rel).read_text(), rx).items():
            if value in out:
                continue
            msg, mline = said.get(value, (None, 0))
            src = f"{label}:include/{rel}:{line}"
            if msg is not None:
                src += f"; include/{codes}:{mline}"
            out[value] = Code("acl", value, name, msg, src)
    return [out[k] for k in sorted(out)]


_OOM = re.compile(
    r"MemoryAllocation|OutOfMemory|MEMORY_ALLOCATION|OUT_OF_MEMORY|BAD_ALLOC|_ALLOC_FAIL"
)
_CAPTURE = re.compile(r"StreamCapture|CapturedEvent|CAPTURE|_CAPTURED\b|CAPTURING|STREAM_UNJOINED")
_UNSUPPORTED = re.compile(r"NotSupported|NOT_SUPPORT|FEATURE_UNSUPPORTED")


def _judge(c: Code) -> tuple[str, bool]:
    """The class and capture mark of a code, from its enumerator name (one rule for all); an
    NCCL result is a collective's failure: distributed."""
    if c.runtime == "nccl":
        return "distributed", False
    if _OOM.search(c.name):
        return "oom", False
    if _CAPTURE.search(c.name) and "NOT_CAPTURED" not in c.name:
        return "stream_capture_invalid", True
    if _UNSUPPORTED.search(c.name):
        return "unsupported_op", False
    return "other", False


def _labels(args: argparse.Namespace) -> list[str]:
    return [*args.cuda, args.hip_header, args.hip_strings, args.nccl, args.acl]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cuda", action="append", default=[], help="LABEL=DIR of a cuda runtime wheel")
    ap.add_argument("--hip-header", required=True)
    ap.add_argument("--hip-strings", required=True)
    ap.add_argument("--nccl", required=True)
    ap.add_argument("--acl", required=True)
    args = ap.parse_args()
    rows = (
        cuda(args.cuda)
        + cu(args.cuda[-1])
        + hip(args.hip_header, args.hip_strings)
        + nccl(args.nccl)
        + acl(args.acl)
    )
    out = []
    for c in rows:
        cls, capture = _judge(c)
        row: dict[str, object] = {"runtime": c.runtime, "code": c.code, "name": c.name}
        if c.message is not None:
            row["message"] = c.message
        row |= {"class": cls, "capture": capture, "source": c.source}
        out.append(row)
    # JSON, one code a line: the table is read by every worker at start-up, and json reads it in
    # half a millisecond where a YAML parser takes fifty
    head = {
        "generated_by": "tools/gen_runtime_codes.py (see its docstring); do not edit by hand",
        "generated_from": [_split(a)[0] for a in _labels(args)],
    }
    sys.stdout.write("{\n")
    for k, v in head.items():
        sys.stdout.write(f"  {json.dumps(k)}: {json.dumps(v)},\n")
    sys.stdout.write('  "codes": [\n')
    sys.stdout.write(",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in out))
    sys.stdout.write("\n  ]\n}\n")


if __name__ == "__main__":
    main()
