"""Numbers bounded end to end (issue 36 item 1): whatever number a log line holds, within what
its field admits (``diag.events.FIELD_LIMITS``: 15-digit ints, any finite float) or past it,
the whole command reads, advises, prices and renders without a traceback, and the other
inputs are analysed as if the bad line were not there.

The lines are the project's own fixture logs with one number replaced (a vLLM stats line's
``Avg generation throughput`` of 20 or 100 digits was an ``OverflowError`` in the bucket
solver; a 12-digit ``cuda_graph_max_bs`` built a default window billions of sizes long)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.cli import main
from tests.bad_inputs_support import INCIDENTS, assert_good_log_analysed, cli

NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
#: the largest admitted values and the first ones past them, and far past
EXTREMES = [
    "9" * 15,
    "9" * 16,
    "9" * 19 + ".0",
    "1" + "0" * 100 + ".0",
    "9" * 400,
    "9" * 5000,
    "0." + "0" * 300 + "1",
    "0",
    "1.7976931348623157" + "0" * 292,
]
BASES = ["vllm-enforce-eager", "vllm-healthy", "sglang-healthy", "sglang-padding-waste"]


def _with_number(base: str, line_no: int, position: int, value: str) -> str:
    lines = (INCIDENTS / base / "server.log").read_text().splitlines()
    spots = [(i, m) for i, ln in enumerate(lines) for m in NUM.finditer(ln)]
    i, _ = spots[line_no % len(spots)]
    ms = list(NUM.finditer(lines[i]))
    m = ms[position % len(ms)]
    lines[i] = lines[i][: m.start()] + value + lines[i][m.end() :]
    return "\n".join(lines) + "\n"


def _throughput(digits: str) -> str:
    text = (INCIDENTS / "vllm-enforce-eager" / "server.log").read_text()
    return text.replace("Avg generation throughput: 1230.0", f"Avg generation throughput: {digits}")


@pytest.mark.parametrize(
    "value", ["1" + "0" * 20 + ".0", "1" + "0" * 100 + ".0", "1" + "0" * 300 + ".0", "1e-300"]
)
def test_an_extreme_generation_throughput_is_no_crash(tmp_path: Path, value: str) -> None:
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(INCIDENTS / "sglang-healthy" / "server.log", folder / "server.log")
    (folder / "vllm.log").write_text(_throughput(value.replace("1e-300", "0." + "0" * 299 + "1")))
    out = cli(folder, out=tmp_path / "reports")
    assert out.code in (0, 1), out.stderr
    assert_good_log_analysed(out, folder)
    runs = out.runs_from(folder / "vllm.log")
    assert runs and runs[0]["record"]["batches"]["eager"] > 0  # the other stats lines count


@pytest.mark.parametrize("value", ["999999999999", "9" * 15, "9" * 400])
@pytest.mark.parametrize("key", ["cuda_graph_max_bs=", "cuda_graph_bs=", "Capture cuda graph bs "])
def test_a_garbled_capture_size_is_not_read(tmp_path: Path, value: str, key: str) -> None:
    """In the config echo or the engine's own capture list, a size past what a config holds
    (``CONFIG_INT_LIMIT``) is not read (it made a default window billions of sizes long)."""
    text = (INCIDENTS / "issue24-sglang-five-lines-one-second" / "server.log").read_text()
    new = value if key == "cuda_graph_max_bs=" else f"[1, {value}]"
    text, n = re.subn(re.escape(key) + r"(\d+|None|\[[^\]]*\])", key + new, text)
    assert n == 1
    (tmp_path / "server.log").write_text(text)
    out = cli(tmp_path / "server.log", out=tmp_path / "reports")
    assert out.code in (0, 1), out.stderr
    assert out.doc is not None and out.doc["runs"]
    rec = out.doc["runs"][0]["record"]
    assert (rec["cuda_graph_max_bs"] or 0) < 10**7


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    base=st.sampled_from(BASES),
    line_no=st.integers(0, 10**6),
    position=st.integers(0, 12),
    value=st.one_of(
        st.sampled_from(EXTREMES),
        st.integers(0, 10**15 - 1).map(str),
        st.floats(0, 1e308, allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.1f}"),
    ),
)
def test_any_number_anywhere_goes_through_advice_pricing_and_rendering(
    tmp_path: Path, base: str, line_no: int, position: int, value: str
) -> None:
    """The whole command, every output (HTML, JSON, text, markdown): exit 0 or 1, never a
    traceback."""
    case = tmp_path / f"{base}-{line_no}-{position}-{len(value)}"
    case.mkdir()
    (case / "server.log").write_text(_with_number(base, line_no, position, value))
    for fmt in ("text", "markdown"):
        res = CliRunner().invoke(
            main, ["analyze", str(case), "-o", str(case / "o"), "-q", "-j", "1", "--format", fmt]
        )
        assert res.exit_code in (0, 1), (res.output, res.exception)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
