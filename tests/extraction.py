"""The fixture that runs a test module twice, once per bulk extraction of the hot path: the C
scanner and the RE2 kernels. Import it into a module (``from tests.extraction import
extraction``) to make it apply there (it is autouse)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from diag.ingest.hotpath.native import ENV_NATIVE, native_available


@pytest.fixture(scope="module", autouse=True, params=["c", "re2"])
def extraction(request: pytest.FixtureRequest) -> Iterator[str]:
    """The hot path's extraction: the C scanner or the RE2 kernels (module-scoped: hypothesis
    tests take no function-scoped fixture; worker processes inherit the variable)."""
    if request.param == "c" and not native_available():
        pytest.skip("the C extension is not built (tests/test_hotpath_native.py says why)")
    saved = os.environ.get(ENV_NATIVE)
    os.environ[ENV_NATIVE] = "1" if request.param == "c" else "0"
    try:
        yield request.param
    finally:
        if saved is None:
            del os.environ[ENV_NATIVE]
        else:
            os.environ[ENV_NATIVE] = saved
