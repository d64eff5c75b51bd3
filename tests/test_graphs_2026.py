"""record.graphs on 2026 vLLM settings: encoder graph budgets and LoRA-specialised graphs."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from gen import vllm_logs as vl


def _log(tmp_path: Path, *, mm: bool, lora: bool) -> Path:
    lines, _ = vl.server_log("0.33.0", max_num_seqs=64, max_num_batched_tokens=2048, seed=4)
    out = []
    for line in lines:
        if mm:
            line = line.replace(
                "'cudagraph_specialize_lora': True, ",
                "'cudagraph_specialize_lora': True, 'cudagraph_mm_encoder': True, "
                "'encoder_cudagraph_token_budgets': [2048, 1024], ",
            )
        if lora:
            line = line.replace("'max_num_seqs': 64", "'max_num_seqs': 64, 'enable_lora': True")
        out.append(line)
    path = tmp_path / "server.log"
    path.write_text("\n".join(out) + "\n")
    return path


def _graphs(path: Path) -> dict[str, dict]:
    (run,) = analyze([str(path)], generated_at="fixed").runs
    return {g["runner"]: g for g in run.record.to_json()["graphs"]}


def test_encoder_budgets_are_a_runner_of_their_own(tmp_path: Path) -> None:
    graphs = _graphs(_log(tmp_path, mm=True, lora=False))
    assert graphs["encoder"]["sizes"] == [1024, 2048]
    assert graphs["encoder"]["unit"] == "tokens"
    assert set(graphs) == {"decode", "mixed", "encoder"}
    assert "specialized" not in graphs["decode"]


def test_lora_specialisation_marks_the_doubled_sets(tmp_path: Path) -> None:
    graphs = _graphs(_log(tmp_path, mm=False, lora=True))
    assert graphs["decode"]["specialized"] == ["lora"]
    assert graphs["mixed"]["specialized"] == ["lora"]
    assert "encoder" not in graphs


def test_without_either_setting_nothing_is_added(tmp_path: Path) -> None:
    graphs = _graphs(_log(tmp_path, mm=False, lora=False))
    assert set(graphs) == {"decode", "mixed"}
    assert all("specialized" not in g for g in graphs.values())
