"""``graphdiag rules``: the rule catalogue, generated from the rule registry."""

from __future__ import annotations

import json
import sys

import click

from diag.cli.common import format_option, warn

EPILOG = """\b
Examples:
  graphdiag rules
  graphdiag rules GD120 GD140
  graphdiag rules --format json > rules.json

\b
Each rule: code, name, severity, what it means, when it fires, its thresholds (which
analyze --rules FILE can override) and its remedies per engine, version range and cause.
CODE (any case, e.g. gd120) shows only those rules.

\b
Exit codes: 0 listed; 2 usage error or a code that is no rule.
"""


@click.command(epilog=EPILOG)
@click.argument("codes", nargs=-1, metavar="[CODE]...")
@format_option(["text", "json"])
def rules(codes: tuple[str, ...], fmt: str) -> None:
    """The rule catalogue (or the rules CODE...): code, name, severity, documentation,
    thresholds, remediation."""
    from diag.rules.registry import RULES

    chosen = list(RULES)
    if codes:
        by_code = {r.code: r for r in RULES}
        wanted = [c.strip().upper() for c in codes]
        unknown = [c for c in wanted if c not in by_code]
        if unknown:
            warn(
                f"no rule {', '.join(unknown)}; the codes are {RULES[0].code}-{RULES[-1].code} "
                "(graphdiag rules lists them)"
            )
            sys.exit(2)
        chosen = [by_code[c] for c in dict.fromkeys(wanted)]
    if fmt == "json":
        click.echo(json.dumps([r.catalogue() for r in chosen], indent=2))
        return
    for r in chosen:
        click.echo(f"{r.code} {r.name} [{r.severity}]")
        for line in r.user_doc().splitlines():
            click.echo(f"    {line}" if line else "")
        click.echo(f"    fires when: {r.trigger}")
        for k, t in r.thresholds.items():
            click.echo(f"    threshold {k} = {t.value:g}  ({t.why})")
        for rem in r.remedies:
            c = rem.catalogue()
            scope = c["engine"] + ("" if c["versions"] == "all" else f" {c['versions']}")
            if c["causes"] != ["any"]:
                scope += f", {'/'.join(c['causes'])}"
            click.echo(f"    remedy ({scope}): {rem.text}")
        click.echo("")
