"""FULL graphs refused by the attention backend (issue 35, config-caused eager): vLLM's own
line names the backend (vllm==0.20.0:vllm/config/compilation.py:1323-1388; the format calls
are held to the wheel in tests/data/engine_formats_2026.yaml), and GD160 says which backend
refused which mode. A mode override that names no backend claims none."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze

K9S = Path(__file__).parent.parent / "fixtures" / "incidents" / "vllm-downgraded-k9s" / "server.log"
REFUSED = (
    "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with MLACommonMetadataBuilder backend "
    "(support: AttentionCGSupport.NEVER); setting cudagraph_mode=PIECEWISE because attention "
    "is compiled piecewise"
)


def _gd160(path: Path) -> str:
    report = analyze([str(path)], generated_at="fixed")
    (msg,) = [f.message for f in report.runs[0].findings if f.code == "GD160"]
    return msg


def test_the_refusing_backend_is_named() -> None:
    assert REFUSED in K9S.read_text()
    msg = _gd160(K9S)
    assert msg.startswith("The attention backend MLACommonMetadataBuilder does not support")
    assert "mode now PIECEWISE" in msg


def test_the_spec_decode_refusal_names_its_backend(tmp_path: Path) -> None:
    spec = (
        "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention "
        "backend FlashInferMetadataBuilder (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_"
        "DECODE); setting cudagraph_mode=PIECEWISE"
    )
    path = tmp_path / "server.log"
    path.write_text(K9S.read_text().replace(REFUSED, spec))
    assert _gd160(path).startswith("The attention backend FlashInferMetadataBuilder")


def test_an_override_without_a_backend_claims_none(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        K9S.read_text().replace(
            REFUSED,
            "Pooling models do not support full cudagraphs. Overriding cudagraph_mode "
            "to PIECEWISE.",
        )
    )
    msg = _gd160(path)
    assert "attention backend" not in msg and "mode now PIECEWISE" in msg
