"""Build of the optional C extension of the hot path (everything else is in pyproject.toml).

``diag/ingest/hotpath/_cscan*.c`` is the compiled line scanner (bench/README.md, "The
columnar hot path"). It is optional: without a compiler the install still succeeds and the
hot path uses its RE2 kernels (``GRAPHDIAG_REQUIRE_NATIVE=1`` makes the tests insist on it).
"""

from setuptools import Extension, setup

HOTPATH = "diag/ingest/hotpath/"

setup(
    ext_modules=[
        Extension(
            "diag.ingest.hotpath._cscan",
            sources=[
                HOTPATH + "_cscan.c",
                HOTPATH + "_cscan_prog.c",
                HOTPATH + "_cscan_sglang.c",
                HOTPATH + "_cscan_vllm.c",
            ],
            depends=[HOTPATH + "_cscan.h"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
        # the trace reader's pre-scan (diag/artifacts/trace_reader.py; optional likewise)
        Extension(
            "diag.artifacts._tracescan",
            sources=["diag/artifacts/_tracescan.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
    ]
)
