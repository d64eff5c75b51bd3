"""A run's raw settings from its config table, handed to the engine spec to read once.

The config table holds every echo of the settings (a pasted command line, vLLM's typed
"non-default args", the engine's config echo, SGLang's ``server_args=``). This module
picks which echo says what (:class:`~diag.engines.config.ConfigEcho`); the engine spec
reads the keys into :class:`~diag.engines.config.EngineConfig`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from diag.engines import ConfigEcho, EngineConfig, read_config
from diag.events import EventTables
from diag.facts.access import _rank0, col, once_per_frame
from diag.parsers.cmdline import ORIGIN as CMDLINE
from diag.parsers.vllm.patterns import TYPED_ARG_ORIGINS

# SGLang's server_args= is printed after ServerArgs.__post_init__ changed it
# (sglang==0.5.2:srt/entrypoints/engine.py:124): the user's, not what was typed
USER_ARG_ORIGINS = (*TYPED_ARG_ORIGINS, "server_args")


def engine_config(tables: EventTables, backend: str, version: str | None) -> EngineConfig:
    """The run's config as its engine's spec reads it."""
    return read_config(backend, config_echo(tables), version)


def config_echo(tables: EventTables) -> ConfigEcho:
    """The effective values, the args the user typed, and the user's own value per key."""
    table = tables["config"]
    echo = _Echo(table)
    typed = echo.where(TYPED_ARG_ORIGINS)
    if not typed:  # no echo of the typed args: the pasted command line is what was typed
        typed = echo.where((CMDLINE,))
    user = {**echo.decoded(echo.where((CMDLINE,))), **echo.decoded(echo.where(USER_ARG_ORIGINS))}
    return ConfigEcho(config_values(tables), echo.decoded(typed), user)


def config_values(tables: EventTables) -> dict[str, Any]:
    """Effective settings: later echoes override earlier ones, rank 0 preferred. A pasted
    command line comes first, so any echo of what the engine used overrides it; an echo of
    the typed args themselves (vLLM "non-default args") replaces it whole."""
    echo = _Echo(_rank0(tables["config"]))
    rows = list(range(len(echo.origins)))
    pasted = echo.where((CMDLINE,))
    if pasted:
        if echo.where(TYPED_ARG_ORIGINS):
            rows = [i for i in rows if echo.origins[i] != CMDLINE]
        else:  # the pasted line first, the echoes after it in their order
            rows = pasted + [i for i in rows if echo.origins[i] != CMDLINE]
    return echo.decoded(rows)


class _Echo:
    """The config rows' origins, keys and values as lists: a run's few dozen rows read
    from Python (a pandas filter per origin cost ~0.1 ms, six a run)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.origins, self.keys, self.values = _echo_columns(frame)

    def where(self, origins: tuple[str, ...]) -> list[int]:
        """Positions of the rows of these origins, in order."""
        return [i for i, o in enumerate(self.origins) if o in origins]

    def decoded(self, rows: list[int]) -> dict[str, Any]:
        """Key -> value (JSON-decoded where the value is JSON), the last row of a key winning."""
        out: dict[str, Any] = {}
        for i in rows:
            value = self.values[i]
            try:
                out[self.keys[i]] = json.loads(value) if value is not None else None
            except (TypeError, ValueError):
                out[self.keys[i]] = value
        return out


@once_per_frame
def _echo_columns(frame: pd.DataFrame) -> tuple[list[Any], list[Any], list[Any]]:
    """The config rows' origins, keys and values, read once a frame (the echo and the
    effective values read the same rows: Arrow strings' ``tolist`` cost ~30 us a column)."""
    if len(frame) == 0:
        return [], [], []
    origins, keys, values = (col(frame, name).tolist() for name in ("origin", "key", "value"))
    return origins, keys, values
