"""A process prefix around the whole stream (a Ray actor's ``(pid=N, ip=...)``, a
``(RayWorkerWrapper pid=N)``) is the stream's process, not a rank: the workers' own prefixes
inside it name the ranks, and the driver (the lowest pid, which spawned the others) counts as
rank 0. A vLLM V0 TP4 start-up is generated here with four ``Graph capturing finished in 16
secs`` lines; wrapped or not, the capture took 16 s, never their 64 s sum, on both read paths.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from diag.normalize.prefix import peel
from tests.test_hotpath_oracle import assert_same_tables, both

DRIVER_PID, WORKER_PIDS = 4242, (4251, 4252, 4253)
BEGIN = (
    "INFO 01-31 10:27:40 model_runner.py:1250] Capturing the model for CUDA graphs. This may "
    "lead to unexpected consequences if the model is not static."
)
END = "INFO 01-31 10:27:56 model_runner.py:1558] Graph capturing finished in 16 secs, took 0.43 GiB"
WRAPPERS = {
    "none": "",
    "ray task": f"(pid={DRIVER_PID}, ip=10.0.0.5) ",
    "ray actor": f"(LLMRayActor pid={DRIVER_PID}, ip=10.0.0.5) ",
    "ray worker wrapper": f"(RayWorkerWrapper pid={DRIVER_PID}) ",
}


def v0_tp4_log(wrapper: str) -> str:
    """The driver's lines bare, each worker's behind its ``(VllmWorkerProcess pid=N)``."""
    lines = []
    for msg in (BEGIN, END):
        lines += [f"(VllmWorkerProcess pid={pid}) {msg}" for pid in WORKER_PIDS]
        lines.append(msg)
    return "".join(wrapper + ln + "\n" for ln in lines)


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_capture_time_is_one_ranks_not_the_sum(name: str, tmp_path: Path) -> None:
    path = tmp_path / "v0.log"
    path.write_text(v0_tp4_log(WRAPPERS[name]), encoding="utf-8")
    run = analyze([str(path)], generated_at="fixed").runs[0]
    assert run.record.to_json()["capture_time_s"] == 16.0
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, name)


@pytest.mark.parametrize("name", sorted(set(WRAPPERS) - {"none"}))
def test_the_inner_prefix_names_the_worker(name: str) -> None:
    wrapped = peel("t.log", 1, f"{WRAPPERS[name]}(VllmWorkerProcess pid=4251) {END}")
    assert wrapped.rank == "pid4251"
    driver = peel("t.log", 2, WRAPPERS[name] + END)
    assert driver.rank != wrapped.rank
