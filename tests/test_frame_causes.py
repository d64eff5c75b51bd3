"""Issue 34 point 3 / issue 32 point 4: class and cause from the frames as well as the
message. Every row of frame_causes.yaml names its own frame; a message class more precise
than a row may replace (an OOM) keeps it; only the innermost frames decide."""

from __future__ import annotations

import re

import pytest
import yaml

from diag.engines.frame_causes import class_and_cause
from diag.engines.phases import DATA
from diag.rules.causes import Cause, cause_of

RAW = yaml.safe_load((DATA / "frame_causes.yaml").read_text())


def _frame(row: dict[str, str]) -> str:
    path = "/usr/lib/python3/site-packages/" + row["file"].replace("**", "pkg/x").replace("*", "")
    func = re.sub(r"\\w\+", "x", row["func"].split("|")[0]).replace(".*", "f")
    code = " torch.ops._C_custom_ar.register_graph_buffers(fa)" if row.get("code") else ""
    return f'File "{path}", line 7, in {func}{code}'


@pytest.mark.parametrize("row", RAW["rows"], ids=[f"{r['cause']}:{r['file']}" for r in RAW["rows"]])
def test_every_row_names_its_own_frame(row: dict[str, str]) -> None:
    outer = 'File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1, in capture_model'
    got = class_and_cause("other", [outer, _frame(row)])
    assert got == (row["class"], row["cause"]), row["source"]
    assert row["cause"] in Cause.__args__  # one of the causes the rules declare


def test_an_oom_keeps_its_class_and_outer_frames_do_not_decide() -> None:
    ar = 'File "/x/vllm/distributed/device_communicators/custom_all_reduce.py", line 201, in register_graph_buffers'
    assert class_and_cause("oom", [ar]) == ("oom", None)
    inner = [f'File "/x/model{i}.py", line {i}, in forward' for i in range(4)]
    assert class_and_cause("other", [ar, *inner]) == ("other", None)  # beyond the depth


def test_a_message_signature_still_comes_first() -> None:
    text = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert cause_of("other", text, "attention_backend") == "illegal_memory_access"
    assert cause_of("other", "RuntimeError: CUDA error: invalid argument", None) == "other"
    assert (
        cause_of("distributed", "RuntimeError: CUDA error: invalid argument", "custom_all_reduce")
        == "custom_all_reduce"
    )
