"""vLLM step lines held lean (issue 15): the int64 and zero-byte columns of their traffic hold
the values the float conversions gave, and a request log without end lines hashes no id."""

from __future__ import annotations

import pandas as pd


def test_requests_without_end_lines_keep_none() -> None:
    from diag.facts.requests import _lifetimes

    req = pd.DataFrame(
        {
            "request_id": pd.Series(["a", "b", "a"], dtype="str"),
            "action": pd.Series(["received", "added", "added"], dtype="category"),
            "ts": [1.0, 2.0, 3.0],
            "prompt_tokens": pd.array([5, None, 7], dtype="Int64"),
            "max_new_tokens": pd.array([None, 3, None], dtype="Int64"),
        }
    )
    assert _lifetimes(req).empty
