"""vLLM V1 serving frames place an error in ``serving``: the front end's output loop
(``AsyncLLM.output_handler`` -> ``get_output_async``) re-raising a dead core as
``EngineDeadError``, interleaved with the core's own (frameless) root error. The root error
keeps the report; its follow-on report's frames say where the run was."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from tests.conftest import need_corpus

SITE = "/usr/lib/python3.12/site-packages/vllm"
CORE = "(EngineCore_DP0 pid=11) "
API = "(APIServer pid=7) ERROR 06-15 16:27:50 [serving.py:471] "
ROOT_ERROR = CORE + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
# the front end's report, as vllm==0.10.1:vllm/v1/engine/async_llm.py:389 and
# core_client.py:177 raise it once the core died
FRONT_END = [
    "Traceback (most recent call last):",
    f'  File "{SITE}/v1/engine/async_llm.py", line 389, in output_handler',
    "    outputs = await engine_core.get_output_async()",
    f'  File "{SITE}/v1/engine/core_client.py", line 1046, in get_output_async',
    "    raise self._format_exception(outputs) from None",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.",
]


def _run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines) + "\n")
    runs = analyze([str(path)], generated_at="fixed").runs
    assert len(runs) == 1
    return runs[0]


def _interleave(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return out


def test_a_core_error_reported_by_the_serving_front_end_is_serving_failed(tmp_path: Path) -> None:
    core = [
        ROOT_ERROR,
        CORE + "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
    for lines in (
        core + [API + ln for ln in FRONT_END],
        _interleave(core, [API + ln for ln in FRONT_END]),
    ):
        run = _run(tmp_path, lines)
        assert run.verdict == "serving_failed", run.verdict_reason
        # the root error is the one reported, not the front end's follow-on
        assert "illegal memory access" in run.verdict_reason
        assert "EngineDeadError" not in run.verdict_reason
        assert "follow-on" in run.verdict_reason


def test_the_front_end_traceback_alone_is_placed_serving_by_its_frames(tmp_path: Path) -> None:
    run = _run(tmp_path, [API + ln for ln in FRONT_END])
    assert run.verdict == "serving_failed", run.verdict_reason
    assert "follow-on report" not in run.verdict_reason  # its own frames place it


def test_near_miss_a_core_error_without_a_serving_report_stays_unplaced(tmp_path: Path) -> None:
    run = _run(tmp_path, [ROOT_ERROR])
    assert run.verdict == "incomplete", run.verdict_reason


def test_near_miss_engine_core_start_up_frames_are_not_serving(tmp_path: Path) -> None:
    # vllm==0.10.1:vllm/v1/engine/core.py:492 EngineCoreProc.__init__ -> _initialize_kv_caches
    startup = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/v1/engine/core.py", line 492, in __init__',
        "    super().__init__(vllm_config, executor_class, log_stats,",
        f'  File "{SITE}/v1/engine/core.py", line 83, in __init__',
        "    self._initialize_kv_caches(vllm_config)",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    ]
    run = _run(tmp_path, [CORE + "ERROR 06-15 16:27:50 [core.py:700] " + ln for ln in startup])
    assert run.verdict != "serving_failed", run.verdict_reason


def test_the_real_interleaved_report_is_serving_failed() -> None:
    path = need_corpus("real-3") / "vllm-45670-runtime-illegal-address-interleaved-not-capture.log"
    run = analyze([str(path)], generated_at="fixed").runs[0]
    assert run.verdict == "serving_failed", run.verdict_reason
    assert "illegal memory access" in run.verdict_reason
    assert run.record.to_json()["capture_error"] is None
