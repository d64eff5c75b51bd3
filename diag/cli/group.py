"""The one ``graphdiag`` click group every command registers on (see diag/cli/__init__)."""

from __future__ import annotations

import click

from diag.about import __version__
from diag.cli.common import install_signal_handlers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="graphdiag")
def main() -> None:
    """Diagnose CUDA-graph capture in vLLM and SGLang logs."""
    install_signal_handlers()
