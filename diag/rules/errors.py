"""The rules stage's one error, apart from its engine: the command line catches it around the
whole analysis, before the engine (and every module it loads) is imported."""

from __future__ import annotations


class RulesError(ValueError):
    """A rules override file that cannot be used (one-line message)."""
