"""``python -m diag``: the graphdiag command line (see :func:`diag.entry.run`)."""

from diag.entry import run

if __name__ == "__main__":
    run()
