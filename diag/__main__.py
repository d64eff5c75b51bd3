"""``python -m diag``: the graphdiag command line."""

from diag.cli import run

if __name__ == "__main__":
    run()
