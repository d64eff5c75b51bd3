"""Which engine's server-info document a JSON file is, from its first bytes (input kind
``server_info``; diag.parsers.server_info reads it and cites the engines' sources)."""

from __future__ import annotations

#: how much of a .json file met in a folder is read to tell a server-info document (SGLang's
#: opens with its ~400 resolved args; the keys told by are among them)
INFO_SNIFF_BYTES = 256 * 1024


def sniff_server_info(head: bytes) -> str | None:
    """The engine whose server info ``head`` (a file's first bytes) opens, else None: a JSON
    object holding SGLang's ``internal_states`` or its args with graph keys, vLLM's
    ``vllm_config`` beside ``vllm_env`` / ``system_env``, or a vLLM config on its own (its
    ``compilation_config`` beside ``model_config``: ``/server_info``'s ``vllm_config`` saved
    alone, or ``VllmConfig`` dumped as JSON)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] != b"{":
        return None
    if b'"vllm_config"' in text and (b'"vllm_env"' in text or b'"system_env"' in text):
        return "vllm"
    if b'"compilation_config"' in text and b'"model_config"' in text:
        return "vllm"
    if b'"internal_states"' in text or (
        b'"model_path"' in text and b'"tp_size"' in text and b"cuda_graph" in text
    ):
        return "sglang"
    return None
