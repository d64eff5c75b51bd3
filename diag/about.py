"""The tool's own version: a leaf, so reports can stamp it without importing the package."""

__version__ = "0.1.0"
