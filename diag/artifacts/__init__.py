"""Readers for PyTorch artifacts that sit next to serving logs (profiler tables, memory snapshots)."""
