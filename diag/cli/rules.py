"""``graphdiag rules``: the rule catalogue."""

from __future__ import annotations

import json

import click

from diag.cli.common import format_option


@click.command()
@format_option(["text", "json"])
def rules(fmt: str) -> None:
    """The rule catalogue: code, name, severity, trigger, thresholds, remediation."""
    from diag.rules.engine import RuleEngine

    engine = RuleEngine.load()
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in engine.rules], indent=2))
        return
    for r in engine.rules:
        click.echo(f"{r.code} {r.name} [{r.severity}]")
        for line in r.doc.strip().splitlines():
            click.echo(f"    {line}")
        click.echo(f"    when: {' '.join(r.when.split())}")
        for k, v in r.thresholds.items():
            why = r.why.get(k)
            click.echo(f"    threshold {k} = {v}" + (f"  ({why})" if why else ""))
        first = r.remedies({"backend": "sglang", "capture_error_class": "oom"})
        if first:
            click.echo(f"    remedy (sglang): {first[0]}")
        click.echo("")
