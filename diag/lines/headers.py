"""The engines' line headers, declared once: the pieces every reader of a header composes.

The per-line normaliser (:mod:`diag.normalize.prefix`) peels every header form; the bulk
path's RE2 patterns (:mod:`diag.ingest.hotpath.kinds`) read the plain subset of them (RE2
has no look-ahead: a form outside it stays on the per-line path, never read otherwise); the
C scanner (``_cscan_sglang.c`` / ``_cscan_vllm.c``) reads that subset too and is held to the
RE2 patterns line by line (tests/test_hotpath_oracle.py, tests/test_hotpath_fuzz.py). Each
piece is a regex text valid in both Python ``re`` (compiled with ``re.ASCII``) and RE2.

SGLang: ``[2026-08-01 10:00:00 DP0 TP0] `` (sglang==0.5.5:sglang/srt/utils/common.py:1153,
``[%(asctime)s{prefix}]``), vLLM: ``INFO 08-01 10:00:00 [loggers.py:199] `` (vllm/logger.py,
date format ``%m-%d %H:%M:%S``), each possibly behind a process tag ``(EngineCore_DP0
pid=7) `` (vllm/utils: the multiprocessing executor's prefix).
"""

from __future__ import annotations

#: the levels Python logging names (vLLM also prints WARN through its own formatter)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
VLLM_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")

#: one rank word of SGLang's prefix: "TP0", "DP3", "EP-1", "PP_RANK0"
RANK_WORD = r"[A-Z][A-Z_]*-?\d+"
#: SGLang's bracket: optional date, time, optional fraction, rank words
SGLANG_BRACKET = (
    r"\[(?:(?P<date>\d{4}-\d\d-\d\d) )?(?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))?"
    rf"(?P<ranks>(?: {RANK_WORD})*)\]"
)
#: a logging date and time ("2025-11-03 09:00:00")
DATE_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
#: vLLM's month-day and time, its fraction when a formatter adds one
VLLM_STAMP = r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
#: the level alternatives of a header, as a group named ``lvl``
VLLM_LEVEL = "(?P<lvl>" + "|".join(VLLM_LEVELS) + ")"
PYLOG_LEVEL = "(?P<lvl>" + "|".join(LEVELS) + ")"
#: a process tag's name as the bulk path reads it (the per-line path reads any qualifiers)
PROCESS_NAME_PLAIN = r"[A-Za-z_]\w*(?: rank=\d+)?"
#: the pid and the Ray worker's ip after it
PROCESS_PID = r"pid=\d+(?:, ip=[^)\n]*)?"
