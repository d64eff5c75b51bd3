"""Shared test helpers: where the shared corpus is, and the fixture generators' import path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# beside the checkout; GRAPHDIAG_SHARED names it for a worktree kept elsewhere
SHARED = Path(os.environ.get("GRAPHDIAG_SHARED") or ROOT.parent / "shared")
CORPUS = SHARED / "corpus"

# fixtures/gen is the project's own generator package (not installed with the wheel)
if str(ROOT / "fixtures") not in sys.path:
    sys.path.insert(0, str(ROOT / "fixtures"))


def need_corpus(sub: str = "real") -> Path:
    path = CORPUS / sub
    if not path.is_dir():
        pytest.skip(f"shared corpus not present at {path}")
    return path
