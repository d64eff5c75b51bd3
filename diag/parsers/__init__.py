"""Line parsers, one per engine plus engine-neutral ones (tracebacks, benchmark summaries).

:mod:`~diag.parsers.scan` feeds each stream's lines through the parsers that
:func:`~diag.parsers.registry.parsers_for` picks from the engine specs; every parser writes
events into :mod:`diag.events` tables and keeps its per-stream state in the scanner's context.
"""
