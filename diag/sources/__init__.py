"""Inputs: which files to read, in what order, and how to get their bytes safely."""
