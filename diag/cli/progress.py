"""The progress meter on stderr, over the whole command: reading (bytes, rate, ETA), then
each analysis and rendering stage (what it is doing, n of m, its own ETA).

Why a window: the reading rate is measured over the last :data:`WINDOW_S` seconds, not since
the start, so a slow first block (worker start-up, a cold cache) neither inflates the ETA for
the rest of the read nor keeps it climbing while the byte count waits for a worker's segment;
with no bytes in the window the meter says it is waiting instead of guessing. A stage's ETA
is its own measured time per item, and while a stage runs (one big run's facts can take a
minute) a ticker thread redraws its elapsed time every :data:`TICK_S`, so a long stage never
looks like a hang. The ticker starts with the first stage, after the last byte is read (no
worker is forked while it runs), and stops in :meth:`Progress.finish`. Shown only on a
terminal, after :data:`FIRST_S`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

WINDOW_S = 8.0  # the reading rate is taken over this many recent seconds
FIRST_S = 1.0  # nothing is drawn before the command has run this long
EVERY_S = 0.2  # redraws at most this often
MIN_SAMPLE_S = 1.0  # no ETA from a window shorter than this
TICK_S = 1.0  # a running stage's line is redrawn this often


def _eta(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f}s"


class Progress:
    """``progress(done, total)`` for bytes read; ``progress.stage(name, done, total)`` for
    each later stage (``total`` 0: a stage that is not counted)."""

    def __init__(
        self,
        quiet: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        force: bool = False,
        ticker: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and (force or self.stream.isatty())
        self.clock = clock
        self.start = clock()
        self.last = float("-inf")
        self.shown = False
        self.width = 0
        self.samples: deque[tuple[float, int]] = deque()
        self.stage_name = ""
        self.stage_start = self.start
        self.stage_count = (0, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticker = ticker

    # ------------------------------------------------------------------ reading
    def rate(self, now: float) -> float | None:
        """Bytes per second over the recent window (None: too short a window to tell)."""
        if len(self.samples) < 2:
            return None
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        if t1 - t0 < MIN_SAMPLE_S:
            return None
        return (b1 - b0) / (t1 - t0)

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[1][0] >= WINDOW_S:
            self.samples.popleft()
        if not self._due(now):
            return
        pct = f"{100 * done / total:5.1f}%" if total else ""
        rate = self.rate(now)
        if rate is None:
            tail = ""
        elif rate <= 0:
            tail = "waiting for the readers"
        else:
            left = (total - done) / rate if total else 0.0
            tail = f"{rate / 2**20:,.1f} MiB/s ETA {_eta(left)}"
        self._draw(f"graphdiag: reading {pct} {done / 2**20:,.0f}/{total / 2**20:,.0f} MiB {tail}")

    # ------------------------------------------------------------------ later stages
    def stage(self, name: str, done: int = 0, total: int = 0) -> None:
        """A stage after reading began (``done`` 0) or advanced (``done`` of ``total``)."""
        if not self.enabled:
            return
        with self._lock:
            now = self.clock()
            if name != self.stage_name:
                self.stage_name, self.stage_start = name, now
                self.last = float("-inf")  # a new stage is always shown
            self.stage_count = (done, total)
            if self._due(now):
                self._draw(self._stage_text(now))
        if self._ticker and self._thread is None:
            self._thread = threading.Thread(
                target=self._tick, name="graphdiag-progress", daemon=True
            )
            self._thread.start()

    def _stage_text(self, now: float) -> str:
        done, total = self.stage_count
        text = f"graphdiag: {self.stage_name}"
        if total:
            text += f" {done:,}/{total:,}"
            spent = now - self.stage_start
            if 0 < done < total and spent >= MIN_SAMPLE_S:
                text += f" ETA {_eta(spent / done * (total - done))}"
        return text + f" ({now - self.start:,.0f}s)"

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self.stage_name and not self._stop.is_set():
                    now = self.clock()
                    if now - self.start >= FIRST_S:
                        self.last = now
                        self._draw(self._stage_text(now))

    # ------------------------------------------------------------------ drawing
    def _due(self, now: float) -> bool:
        if now - self.start < FIRST_S or now - self.last < EVERY_S:
            return False
        self.last = now
        return True

    def _draw(self, text: str) -> None:
        pad = max(0, self.width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.width = len(text)
        self.shown = True

    def finish(self) -> None:
        """Stop the ticker and clear the meter's line (the summary or the data follows on a
        clean line)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.shown:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.shown = False
            self.width = 0
