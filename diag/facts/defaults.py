"""The engines' default capture-size lists, for logs that do not print theirs.

Encodes ``vllm-log-formats.md`` §11 and ``sglang-log-formats.md`` §7. Versions are parsed
loosely ("0.4.6.post3", "0.11.1rc6.dev115+g...", "v0.10.0"); an unknown version gets the
newest era's rule. Everything here is an inference and is labelled so by callers.
"""

from __future__ import annotations

import re


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.4.6.post3' -> (0, 4, 6, 3); 'v0.11.1rc6.dev1' -> (0, 11, 1, 0)."""
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) if g else 0 for g in m.groups())


def _s(m: int) -> list[int]:
    return [x for x in [1, 2, 4] if x <= m] + list(range(8, m + 1, 8))


def _t(m: int) -> list[int]:
    small = [x for x in [1, 2, 4] if x <= m] + [x for x in range(8, 256, 8) if x <= m]
    return small + list(range(256, m + 1, 16))


def vllm_default_sizes(
    version: str | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None = None,
    v0: bool = False,
) -> list[int]:
    """vLLM's capture sizes with no override (§11)."""
    ver = parse_version(version) or (0, 11, 1)
    if v0 or ver < (0, 6, 5):
        seqs = max_num_seqs or 256
        pad = seqs if seqs <= 2 else 4 if seqs <= 4 else -(-seqs // 8) * 8
        cap = min(pad, 256 if ver < (0, 6, 0) else 8192)
        return [x for x in _s(8192) if x <= cap]
    if ver < (0, 10, 0):
        sizes = _s(512)
    elif ver < (0, 11, 1):
        seqs = max_num_seqs or 256
        sizes = sorted(set(_s(min(2 * seqs, 512))) | {1, 2, 4})
    else:
        seqs = max_num_seqs or 256
        sizes = _t(min(2 * seqs, 512, max_num_batched_tokens or 512))
    if max_num_batched_tokens:
        sizes = [x for x in sizes if x <= max_num_batched_tokens] or sizes[:1]
    return sizes


def sglang_default_sizes(
    version: str | None,
    cuda_graph_max_bs: int | None,
    disable_padding: bool = False,
    speculative: bool = False,
) -> list[int]:
    """SGLang's captured batch sizes with no ``--cuda-graph-bs`` (§7)."""
    ver = parse_version(version) or (0, 5, 3)
    max_bs = cuda_graph_max_bs
    if ver >= (0, 5, 3):
        max_bs = max_bs or 160
        if disable_padding:
            sizes = list(range(1, max_bs + 1))
        elif speculative:
            sizes = (
                list(range(1, 9))
                + list(range(10, 33, 2))
                + list(range(40, 65, 4))
                + list(range(72, 257, 8))
                + list(range(272, max_bs + 1, 16))
            )
        else:
            sizes = (
                [1, 2, 4, 8, 12]
                + list(range(16, 257, 8))
                + list(range(272, 497, 16))
                + list(range(512, max_bs + 1, 32))
            )
        sizes = [x for x in sizes if x <= max_bs]
        if max_bs not in sizes:
            sizes.append(max_bs)
        return sizes
    if disable_padding:
        base = list(range(1, 33)) + [48, 64, 80, 96, 112, 128, 144, 160]
    elif ver < (0, 2, 13):
        base = [1, 2, 4] + list(range(8, 129, 8))
    else:
        base = [1, 2, 4] + list(range(8, 161, 8))
    if max_bs:
        base = [x for x in base if x <= max_bs]
        if ver >= (0, 4, 6) and base and base[-1] < max_bs:
            base += list(range(base[-1] + 16, max_bs + 1, 16))
    return base
