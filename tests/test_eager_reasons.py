"""A run's eager batches by reason (diag.batch_labels.eager_reasons): what its HTML section
lists, kept beside the facts so that a fleet's uncharted section reads no rows."""

import pandas as pd
import pytest

from diag.batch_labels import VERDICTS, EagerReason, eager_reasons


def _batches(
    rows: list[tuple[str, str | None, float | None, float]], categorical: bool = False
) -> pd.DataFrame:
    verdict, reason, size, weight = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "verdict": pd.Categorical(verdict, categories=list(VERDICTS)),
            # as the classification makes it (categorical), or as a frame built elsewhere
            "reason": pd.Categorical(reason) if categorical else list(reason),
            "batch_size": list(size),
            "weight": list(weight),
        }
    )


@pytest.mark.parametrize("categorical", [True, False])
def test_eager_batches_are_counted_by_reason_most_first_with_their_size_range(
    categorical: bool,
) -> None:
    got = eager_reasons(
        _batches(
            [
                ("graph", "in_window", 8, 5.0),
                ("eager", "unpadded_gap", 12, 1.0),
                ("eager", "above_ceiling", 300, 2.0),
                ("eager", "above_ceiling", 260, 2.0),
                ("eager", None, None, 1.0),
                ("unknown", "idle", 0, 3.0),
            ],
            categorical,
        )
    )
    assert got == (
        EagerReason("above_ceiling", 4.0, 260.0, 300.0),
        # equal counts keep the order of their first row
        EagerReason("unpadded_gap", 1.0, 12.0, 12.0),
        EagerReason("unknown", 1.0, None, None),
    )


def test_a_run_without_eager_batches_has_none() -> None:
    assert eager_reasons(_batches([("graph", "in_window", 8, 5.0)])) == ()
    assert eager_reasons(pd.DataFrame()) == ()
