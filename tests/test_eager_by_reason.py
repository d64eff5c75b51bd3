"""Eager steps per reason read from the reason codes: the sums and the order (first
appearance among eager batches) that factorising the reasons gives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diag.facts.classify import REASONS, VERDICTS, labels
from diag.rules.metrics import _eager_by_reason


def _by_factorize(batches: pd.DataFrame) -> dict[str, float]:
    eager = (batches["verdict"] == "eager").to_numpy(dtype=bool)
    codes, names = pd.factorize(batches["reason"][eager], use_na_sentinel=True)
    weight = batches["weight"].to_numpy(dtype=float)[eager]
    sums = np.bincount(codes[codes >= 0], weights=weight[codes >= 0], minlength=len(names))
    return {str(n): float(w) for n, w in zip(names, sums, strict=True)}


def test_sums_and_order_of_first_appearance() -> None:
    verdict = ["eager", "graph", "eager", "eager", "eager", "eager"]
    # a later reason first, a missing reason, a graph batch's reason among them
    reason = [REASONS[3], REASONS[1], REASONS[1], None, REASONS[3], REASONS[2]]
    codes = np.array([-1 if r is None else REASONS.index(r) for r in reason], dtype=np.int8)
    batches = pd.DataFrame(
        {
            "verdict": labels(np.array([VERDICTS.index(v) for v in verdict], np.int8), VERDICTS),
            "reason": labels(codes, REASONS),
            "weight": [2.0, 5.0, 1.0, 7.0, 3.0, 4.0],
        }
    )
    got = _eager_by_reason(batches)
    assert list(got.items()) == list(_by_factorize(batches).items())
    assert list(got) == [REASONS[3], REASONS[1], REASONS[2]]
    assert got[REASONS[3]] == 5.0
    plain = batches.assign(reason=batches["reason"].astype(object))  # not categorical
    assert list(_eager_by_reason(plain).items()) == list(got.items())
