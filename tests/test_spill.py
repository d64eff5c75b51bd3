"""diag.spill: values written to a temporary file and read back, bounded memory for fleets."""

from __future__ import annotations

import os
import pickle
import tempfile

import pytest

from diag import spill as spill_mod
from diag.spill import spill


def test_a_spilled_value_reads_back_equal_and_fresh() -> None:
    value = {"runs": [1, 2, 3], "text": "x" * 10_000}
    held = spill(value)
    back = held.load()
    assert back == value and back is not value
    back["runs"].append(4)  # a copy: the spilled state is unchanged
    assert held.load() == value


def test_the_file_is_emptied_when_the_last_handle_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_mod, "_stores", {})  # a store of this test's own
    store = spill_mod._store()
    first, second = spill(list(range(1000))), spill("y" * 5000)
    assert store.file is not None and os.fstat(store.file.fileno()).st_size >= store.end > 0
    del first
    assert store.end > 0  # one handle still reads from it
    del second
    assert store.refs == 0 and store.end == 0
    assert os.fstat(store.file.fileno()).st_size == 0


def test_without_a_temporary_file_the_value_stays_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only or full disk: slower to bound, never lost."""
    monkeypatch.setattr(spill_mod, "_stores", {})

    def refuse(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    held = spill(("kept", 42))
    assert held.load() == ("kept", 42)


def test_a_handle_pickles_as_its_value() -> None:
    """A report sent to another process carries the values, not offsets into this file."""
    held = spill([3.5, "z"])
    again = pickle.loads(pickle.dumps(held))
    assert again.load() == [3.5, "z"]


def test_read_on_ask_reads_each_item_when_asked() -> None:
    from diag.spill import ReadOnAsk

    asked: list[int] = []
    items = ReadOnAsk(3, lambda i: asked.append(i) or i * 10)
    assert len(items) == 3 and asked == []  # nothing read up front
    assert items[1] == 10 and items[-1] == 20 and asked == [1, 2]
    assert list(items) == [0, 10, 20] and items[1:] == [10, 20]
    with pytest.raises(IndexError):
        items[3]


def test_a_held_value_with_reload_is_let_go_unspilled_and_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the values read last, a value kept elsewhere (``reload``) is dropped, never
    written to the spill file, and given back by ``reload`` on the next read; one without
    is spilled and read back from the file."""
    monkeypatch.setattr(spill_mod, "_stores", {})
    monkeypatch.setattr(spill_mod, "LIVE", 1)
    calls: list[int] = []

    def reload() -> list[int]:
        calls.append(1)
        return [1, 2, 3]

    kept = spill_mod.Held([1, 2, 3], reload=reload)
    plain = spill_mod.Held(["a"])  # pushes ``kept`` out
    assert kept._value is None and kept._spilled is None
    assert spill_mod._stores == {}  # nothing written
    assert kept.get() == [1, 2, 3] and calls == [1]  # read back by reload; ``plain`` out
    assert plain._value is None and plain._spilled is not None
    assert plain.get() == ["a"]
    kept.set([4])  # a new value is no longer the one ``reload`` gives: spilled when let go
    spill_mod.Held(["b"])
    assert kept._spilled is not None and kept.get() == [4] and calls == [1]
