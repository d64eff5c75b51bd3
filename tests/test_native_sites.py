"""vLLM's CUDACHECK sites read back from the printed FILE:LINE (``data/native_sites.json``).

The table is the generator's (``tools/gen_native_sites.py`` over every vLLM sdist); these tests
take their lines from it, paste each the ways users bring them and check what the analysis
makes of them: a check that runs only during capture (the graph buffers' IPC registration) is a
capture failure of class distributed, cause custom all-reduce; a check at start-up, shutdown or
on every all-reduce is an engine error, never a capture failure; a line two releases give two
meanings is not read as capture. The generator's rule is tested on a written source.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from diag.engines import errors, native_sites
from tests.test_capture_texts import PREFIX
from tests.test_hotpath_oracle import assert_same_tables, both
from tests.test_raise_atlas import _run

ROOT = Path(__file__).resolve().parent.parent
TABLE = json.loads(native_sites.DATA.read_text(encoding="utf-8"))


def _lines() -> dict[tuple[str, int], set[str]]:
    out: dict[tuple[str, int], set[str]] = defaultdict(set)
    for s in TABLE["sites"]:
        out[(s["file"].rsplit("/", 1)[-1], s["lines"][0])].add(s["role"])
    return out


LINES = _lines()
CAPTURE = sorted(k for k, roles in LINES.items() if roles == {"capture"})
NOT_CAPTURE = sorted(k for k, roles in LINES.items() if "capture" not in roles)
MIXED = sorted(k for k, roles in LINES.items() if "capture" in roles and len(roles) > 1)


def _printed(base: str, line: int, message: str = "invalid argument") -> str:
    return f"Failed: Cuda error /workspace/csrc/{base}:{line} '{message}'"


# bare; behind a ray worker's prefix; behind a k8s/docker timestamp; the quoted message wrapped
# onto the next line (a terminal's fold after the line number), bare and behind the prefix
FORMS = ("bare", "prefixed", "k8s", "folded", "folded_prefixed")


def paste(text: str, form: str) -> str:
    lines = text.split(" '", 1) if form.startswith("folded") else [text]
    if form.startswith("folded"):
        lines[1] = "'" + lines[1]
    pre = {"prefixed": PREFIX, "folded_prefixed": PREFIX}.get(form, "")
    if form == "k8s":
        pre = "2026-06-20T10:00:03.123456789Z stderr F "
    return "".join(pre + ln + "\n" for ln in lines)


def test_the_table_covers_the_releases() -> None:
    """Every release's custom all-reduce has its graph-buffer registration checks."""
    assert len(TABLE["sdists"]) >= 70
    assert TABLE["macro"]["prints"] == "Failed: Cuda error %s:%d '%s'"
    assert len(CAPTURE) >= 20 and len(NOT_CAPTURE) >= 10
    funcs = {s["func"] for s in TABLE["sites"] if s["role"] == "capture"}
    assert {"get_graph_buffer_ipc_meta", "register_graph_buffers"} <= funcs


@pytest.mark.parametrize("form", FORMS)
def test_capture_checks_are_capture_failures(form: str, tmp_path: Path) -> None:
    texts = {f"c{i}": paste(_printed(b, n), form) for i, (b, n) in enumerate(CAPTURE)}
    got = _run(tmp_path, texts)
    bad = [(CAPTURE[int(k[1:])], v) for k, v in got.items() if v != ("distributed", True, 1)]
    assert not bad, bad


@pytest.mark.parametrize("form", ("bare", "prefixed"))
def test_other_checks_are_errors_not_capture_failures(form: str, tmp_path: Path) -> None:
    keys = NOT_CAPTURE + MIXED
    texts = {f"n{i}": paste(_printed(b, n), form) for i, (b, n) in enumerate(keys)}
    got = _run(tmp_path, texts)
    bad = [(keys[int(k[1:])], v) for k, v in got.items() if v[1] or v[2] != 1]
    assert not bad, bad


def test_a_line_no_release_has_is_not_read() -> None:
    used = {n for _, n in LINES}
    free = next(n for n in range(1, 2000) if n not in used)
    assert native_sites.judge_printed(_printed("custom_all_reduce.cuh", free)) is None
    assert not errors.judge(_printed("custom_all_reduce.cuh", free)).capture


def test_the_verdict_names_the_check() -> None:
    base, line = CAPTURE[0]
    v = errors.judge(_printed(base, line))
    assert v.capture and v.error_class == "distributed"
    site = next(s for s in TABLE["sites"] if s["lines"][0] == line and s["file"].endswith(base))
    assert v.site is not None and f"{base}:{line}" in v.site and site["func"] in v.site


def test_both_read_paths_agree(tmp_path: Path) -> None:
    base, line = CAPTURE[-1]
    path = tmp_path / "worker.log"
    path.write_text(
        "INFO 06-20 10:00:01 [gpu_model_runner.py:2000] Model loading took 14.2 GiB\n"
        + _printed(base, line)
        + "\n(EngineCore) ERROR Worker proc VllmWorker-1 died unexpectedly (exit code: None)\n",
        encoding="utf-8",
    )
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "native check")


CUH = """\
#define CUDACHECK(cmd) do { if (cmd) { printf("Failed: Cuda error %s:%d '%s'\\\\n", __FILE__, __LINE__, ""); } } while (0)
class CustomAllreduce {
 public:
  char* open_ipc_handle(const void* ipc_handle) {
    CUDACHECK(cudaIpcOpenMemHandle(
        (void**)&ipc_ptr, h, flags));
    return ipc_ptr;
  }
  void register_buffer(void** ptrs) {
    CUDACHECK(
        cudaMemcpy(d, &data, n, cudaMemcpyHostToDevice));
  }
  void register_graph_buffers(int n) {
    char* handle = open_ipc_handle(&h);
    CUDACHECK(cudaMemcpy(d, r, n, cudaMemcpyHostToDevice));
  }
EXTRA};
"""


def _generate(tmp: Path, extra: str) -> list[dict[str, object]]:
    src = tmp / "vllm-9.9.9" / "csrc"
    src.mkdir(parents=True)
    (src / "custom_all_reduce.cuh").write_text(CUH.replace("EXTRA", extra), encoding="utf-8")
    (tmp / "SHA256").write_text("9.9.9 vllm-9.9.9.tar.gz " + "0" * 64 + "\n", encoding="utf-8")
    code = (
        "import sys, json; sys.path.insert(0, 'tools'); import gen_native_sites as g; "
        f"print(json.dumps(g.build(__import__('pathlib').Path({str(tmp)!r}))['sites']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_the_generator_reads_roles_from_callers(tmp_path: Path) -> None:
    """open_ipc_handle is capture while only the graph registration calls it, and either once
    a start-up function calls it too; a check's printed line is its first."""
    sites = {(s["func"], s["lines"][0]): s for s in _generate(tmp_path / "a", "")}
    assert sites[("open_ipc_handle", 5)]["role"] == "capture"
    assert sites[("open_ipc_handle", 5)]["lines"] == [5, 6]
    assert sites[("register_buffer", 10)]["role"] == "init"
    assert sites[("register_buffer", 10)]["call"] == "cudaMemcpy"
    assert sites[("register_graph_buffers", 15)]["role"] == "capture"
    extra = "  CustomAllreduce(int r) {\n    char* p = open_ipc_handle(&h);\n  }\n"
    sites = {(s["func"], s["lines"][0]): s for s in _generate(tmp_path / "b", extra)}
    assert sites[("open_ipc_handle", 5)]["role"] == "either"
