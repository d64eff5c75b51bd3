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
from diag.facts.access import _rank0
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
    typed = table[table["origin"].isin(TYPED_ARG_ORIGINS)] if not table.empty else table
    if typed.empty:  # no echo of the typed args: the pasted command line is what was typed
        typed = table[table["origin"] == CMDLINE] if not table.empty else table
    user = (
        {
            **_decoded(table[table["origin"] == CMDLINE]),
            **_decoded(table[table["origin"].isin(USER_ARG_ORIGINS)]),
        }
        if not table.empty
        else {}
    )
    return ConfigEcho(config_values(tables), _decoded(typed), user)


def config_values(tables: EventTables) -> dict[str, Any]:
    """Effective settings: later echoes override earlier ones, rank 0 preferred. A pasted
    command line comes first, so any echo of what the engine used overrides it; an echo of
    the typed args themselves (vLLM "non-default args") replaces it whole."""
    f = _rank0(tables["config"])
    if not f.empty and (f["origin"] == CMDLINE).any():
        if f["origin"].isin(TYPED_ARG_ORIGINS).any():
            f = f[f["origin"] != CMDLINE]
        else:
            f = f.sort_values("origin", key=lambda o: o != CMDLINE, kind="stable")
    return _decoded(f)


def _decoded(frame: pd.DataFrame) -> dict[str, Any]:
    """Key -> value (JSON-decoded where the value is JSON), the last row of a key winning."""
    out: dict[str, Any] = {}
    if frame.empty:
        return out
    for key, value in zip(frame["key"], frame["value"], strict=True):
        try:
            out[key] = json.loads(value) if value is not None else None
        except (TypeError, ValueError):
            out[key] = value
    return out
