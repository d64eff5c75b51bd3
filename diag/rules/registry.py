"""The registry: every rule class, in code order. The catalogue (``graphdiag rules``), the
README's rule list, and every code list of tests and fixture generators come from here."""

from __future__ import annotations

from diag.rules.base import Rule
from diag.rules.gd100_capture_failed import GD100
from diag.rules.gd101_too_many_sizes import GD101
from diag.rules.gd102_capture_stalled import GD102
from diag.rules.gd105_engine_error import GD105
from diag.rules.gd106_request_errors import GD106
from diag.rules.gd110_out_of_window import GD110
from diag.rules.gd111_padding_waste import GD111
from diag.rules.gd112_oversized_window import GD112
from diag.rules.gd115_config_eager import GD115
from diag.rules.gd120_kv_squeeze import GD120
from diag.rules.gd130_prefill_node_graph_on import GD130
from diag.rules.gd131_graph_disabled import GD131
from diag.rules.gd140_slow_capture import GD140
from diag.rules.gd150_torch_compile_with_graph import GD150
from diag.rules.gd160_graph_mode_downgraded import GD160
from diag.rules.gd170_out_of_window_slower import GD170
from diag.rules.gd180_trace_contradicts_log import GD180
from diag.rules.gd181_graph_launches_without_ops import GD181
from diag.rules.gd182_logged_inferred_disagree import GD182

RULES: tuple[type[Rule], ...] = (
    GD100,
    GD101,
    GD102,
    GD105,
    GD106,
    GD110,
    GD111,
    GD112,
    GD115,
    GD120,
    GD130,
    GD131,
    GD140,
    GD150,
    GD160,
    GD170,
    GD180,
    GD181,
    GD182,
)
ALL_CODES: tuple[str, ...] = tuple(r.code for r in RULES)
BY_CODE: dict[str, type[Rule]] = {r.code: r for r in RULES}

README_BEGIN = "<!-- rules:begin (generated from diag/rules/registry.py) -->"
README_END = "<!-- rules:end -->"


def readme_table() -> str:
    """The README's rule list, between its markers."""
    lines = [README_BEGIN, "| code | name | severity | what it means |", "|---|---|---|---|"]
    for r in RULES:
        lines.append(f"| {r.code} | {r.name} | {r.severity} | {r.summary()} |")
    lines.append(README_END)
    return "\n".join(lines)


def write_readme(path: str) -> None:
    """Rewrite the rule list between the README's markers."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text(encoding="utf-8")
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    p.write_text(text[:start] + readme_table() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    import sys

    write_readme(sys.argv[1] if len(sys.argv) > 1 else "README.md")
