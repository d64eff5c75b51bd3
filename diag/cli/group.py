"""The one ``graphdiag`` click group every command registers on (see diag/cli/__init__)."""

from __future__ import annotations

import click

from diag.about import __version__
from diag.cli.common import exit_interrupted, install_signal_handlers

EPILOG = """\b
Examples:
  graphdiag analyze logs/                     reports/logs.graphdiag.html + .json, summary
  graphdiag analyze server.log.gz --format markdown > ticket.md
  kubectl logs pod/vllm-0 | graphdiag analyze - -o out/
  graphdiag analyze logs/ --fail-on warning   in CI: exit 1 on any warning or error
  graphdiag recommend logs/                   a capture bucket set and the flags to paste
  graphdiag compare before.log after.log      two runs side by side
  graphdiag parse logs/ --format parquet -o events/

\b
PATH may be a file (plain, .gz, rotated), a folder (read recursively), or - for stdin.

\b
Exit codes:
  0    analysed; no finding at or above --fail-on (default: error)
  1    a finding at or above --fail-on
  2    usage error, bad rules file, or no input could be read
  130  interrupted (SIGINT), 143 terminated (SIGTERM); no report written
"""


class InterruptibleGroup(click.Group):
    """Ctrl-C or SIGTERM in any command ends it the one way (exit 130/143, no traceback,
    no "Aborted!"), not click's default exit 1."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            exit_interrupted()


@click.group(
    cls=InterruptibleGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EPILOG,
)
@click.version_option(__version__, prog_name="graphdiag")
def main() -> None:
    """Diagnose CUDA-graph capture in vLLM and SGLang logs: which decode batches ran on
    captured graphs and which fell back to eager, capture errors, KV squeeze, padding
    waste. `graphdiag COMMAND --help` shows each command's options and examples."""
    install_signal_handlers()
