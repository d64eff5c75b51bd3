"""``graphdiag rules``: the rule catalogue, generated from the rule registry."""

from __future__ import annotations

import json

import click

from diag.cli.common import format_option

EPILOG = """\b
Examples:
  graphdiag rules
  graphdiag rules --format json > rules.json

\b
Each rule: code, name, severity, what it means, when it fires, its thresholds (which
analyze --rules FILE can override) and its remedies per engine, version range and cause.

\b
Exit codes: 0 listed; 2 usage error.
"""


@click.command(epilog=EPILOG)
@format_option(["text", "json"])
def rules(fmt: str) -> None:
    """The rule catalogue: code, name, severity, documentation, thresholds, remediation."""
    from diag.rules.registry import RULES

    if fmt == "json":
        click.echo(json.dumps([r.catalogue() for r in RULES], indent=2))
        return
    for r in RULES:
        click.echo(f"{r.code} {r.name} [{r.severity}]")
        for line in r.doc().splitlines():
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
