"""Locate data files (lark grammars, rule packs, templates) in the wheel or the source tree."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


@cache
def grammar_text(name: str) -> str:
    """The text of ``grammars/<name>``: installed as ``diag.grammars``, or the source tree's."""
    try:
        return resources.files("diag.grammars").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        return (_SOURCE_ROOT / "grammars" / name).read_text(encoding="utf-8")


def package_file(*parts: str) -> Path:
    """Path of a data file shipped inside the ``diag`` package (rule packs, templates)."""
    return Path(__file__).resolve().parent.joinpath(*parts)
