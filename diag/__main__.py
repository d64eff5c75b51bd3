"""``python -m diag``: the graphdiag command line."""

from diag.cli import main

if __name__ == "__main__":
    main()
