"""Shared test helpers: where the shared corpus is, and the fixture generators' import path."""

from __future__ import annotations

import os
import re
import subprocess
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


#: CI (``CI=true``, as .ci/run is run) must test against the shared corpus: a CI run without it
#: would pass by skipping the corpus tests, so it stops before any test instead
CORPUS_REQUIRED = os.environ.get("CI", "").lower() in ("true", "1")
CORPUS_SETS = ("real", "real-2", "real-3", "real-4", "snapshots", "profiler-tables", "traces")


def pytest_configure(config: pytest.Config) -> None:
    missing = [s for s in CORPUS_SETS if not (CORPUS / s).is_dir()]
    if CORPUS_REQUIRED and missing:
        raise pytest.UsageError(
            f"CI=true but the shared corpus is incomplete at {CORPUS} (missing: "
            f"{', '.join(missing)}): the corpus tests would be skipped, not run"
        )


def need_corpus(sub: str = "real") -> Path:
    path = CORPUS / sub
    if not path.is_dir():
        if CORPUS_REQUIRED:
            pytest.fail(f"shared corpus not present at {path} (CI=true)")
        pytest.skip(f"shared corpus not present at {path}")
    return path


# ------------------------------------------------------------------ the tree stays as it was
#: what a test run may leave in the tree: interpreter, tool and build caches
_CACHES = re.compile(
    r"(^|/)(__pycache__|\.pytest_cache|\.mypy_cache|\.ruff_cache|\.hypothesis|build|[^/]*\.egg-info)(/|$)"
    r"|\.(pyc|so)$"
)


def _tree_files() -> set[str] | None:
    """Untracked, ignored and modified paths of the working tree (None: not a git tree)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    paths = {line[3:].strip('"') for line in out.stdout.splitlines() if len(line) > 3}
    return {p for p in paths if not _CACHES.search(p)}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_TREE] = _tree_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests write into temporary folders only: a run that leaves a new or changed file in
    the source tree (a report, a screenshot) fails, naming it."""
    before = session.config.stash.get(_TREE, None)
    after = _tree_files()
    if before is None or after is None:
        return
    left = sorted(after - before)
    if left:
        sys.stderr.write("\ntests left files in the source tree: " + ", ".join(left[:10]) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TREE = pytest.StashKey[set[str] | None]()
