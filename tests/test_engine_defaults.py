"""The engine specs' default capture sizes equal what the engines' own source returns.

``tests/data/engine_defaults.yaml`` holds lists evaluated from SGLang's released source
(file, function and version cited per block), not from graphdiag or its fixture
generator; a row that disagrees with ``diag.engines`` fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.engines import SGLANG, VLLM
from diag.engines import vllm as vllm_spec
from diag.engines.sglang import default_capture_sizes

TABLE = Path(__file__).parent / "data" / "engine_defaults.yaml"
_TABLE = yaml.safe_load(TABLE.read_text())
ROWS: list[dict[str, Any]] = _TABLE["sglang"]
VLLM_ROWS: list[dict[str, Any]] = _TABLE["vllm"]


def _id(row: dict[str, Any]) -> str:
    flags = ("" if row["padding"] else "-nopad") + ("-spec" if row["speculative"] else "")
    return f"{row['version']}-max{row['cuda_graph_max_bs']}{flags}"


@pytest.mark.parametrize("row", ROWS, ids=[_id(r) for r in ROWS])
def test_sglang_default_sizes_match_its_source(row: dict[str, Any]) -> None:
    got = default_capture_sizes(
        row["version"], row["cuda_graph_max_bs"], not row["padding"], row["speculative"]
    )
    assert sorted(got) == row["sizes"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["cuda_graph_max_bs"]], ids=_id)
def test_spec_reads_the_same_defaults_from_a_config_echo(row: dict[str, Any]) -> None:
    """The spec's config-echo entry point (what facts and advice call) gives the same list."""
    config = {
        "cuda_graph_max_bs": row["cuda_graph_max_bs"],
        "disable_cuda_graph_padding": not row["padding"],
        "speculative_algorithm": "EAGLE" if row["speculative"] else None,
    }
    assert sorted(SGLANG.default_sizes(row["version"], config, None)) == row["sizes"]


def test_the_table_covers_the_version_boundaries() -> None:
    """Rows on both sides of each version gate the spec encodes (so a gate cannot drift)."""
    versions = {r["version"] for r in ROWS}
    assert {"0.4.6.post5", "0.5.2", "0.5.3", "0.5.4.post2", "0.5.10", "0.5.23"} <= versions


def _vllm_id(row: dict[str, Any]) -> str:
    return f"{row['version']}-seqs{row['max_num_seqs']}-tokens{row['max_num_batched_tokens']}"


@pytest.mark.parametrize("row", VLLM_ROWS, ids=[_vllm_id(r) for r in VLLM_ROWS])
def test_vllm_default_sizes_match_its_source(row: dict[str, Any]) -> None:
    got = vllm_spec.default_capture_sizes(
        row["version"], row["max_num_seqs"], row["max_num_batched_tokens"]
    )
    assert sorted(got) == row["sizes"]


@pytest.mark.parametrize("row", VLLM_ROWS, ids=[_vllm_id(r) for r in VLLM_ROWS])
def test_vllm_spec_reads_the_same_defaults_from_a_config_echo(row: dict[str, Any]) -> None:
    config = {
        "max_num_seqs": row["max_num_seqs"],
        "max_num_batched_tokens": row["max_num_batched_tokens"],
    }
    assert sorted(VLLM.default_sizes(row["version"], config, None)) == row["sizes"]


def test_the_vllm_table_covers_the_version_boundaries() -> None:
    """Rows on both sides of each gate of the vLLM spec (V0 default until 0.8.0, cuda_graph_sizes
    from max_num_seqs at 0.10.0, the step-16 list from 0.11.1)."""
    versions = {r["version"] for r in VLLM_ROWS}
    assert {"0.5.5", "0.7.3", "0.8.5.post1", "0.9.2", "0.10.0", "0.11.0", "0.11.2"} <= versions
