"""Progress of long work on stderr: a bar on a terminal, a line every 10 s in a log, nothing for short work.

Reading a thousand ranks takes minutes; without a sign of life a user kills it, and a CI job
with no output for 10 minutes is killed by its runner. Short work (under ``show_after_s``) prints
nothing, so the common case (one trace, a small run folder) stays quiet, and ``quiet=True``
(``gpudiag report -q``) prints nothing at all. Standard library only.

    with Progress(total_bytes, "reading 8 files") as progress:
        for path in paths:
            read(path)
            progress.advance(size_of(path))

A daemon thread redraws while the work runs, so a bar moves (its clock) even while one big file
is being read; :meth:`Progress.tick` is what it calls, with the time injectable for tests.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

SHOW_AFTER_S = 2.0  # work shorter than this prints nothing
LINE_EVERY_S = 10.0  # without a terminal (a CI log), one line at most this often
REDRAW_EVERY_S = 0.2  # a terminal bar's refresh
BAR_CELLS = 30


class Progress:
    """How far some work of ``total`` units (bytes by default) has gone, drawn on ``stream`` when it is long."""

    def __init__(
        self,
        total: float,
        what: str,
        *,
        stream: TextIO | None = None,
        quiet: bool = False,
        unit: str = "bytes",
        show_after_s: float = SHOW_AFTER_S,
        line_every_s: float = LINE_EVERY_S,
        redraw_every_s: float = REDRAW_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
        autostart: bool = True,
        in_flight: Callable[[], float] | None = None,
    ):
        self.total = float(total)
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.unit = unit
        self.show_after_s = show_after_s
        self.line_every_s = line_every_s
        self.redraw_every_s = redraw_every_s
        self.clock = clock
        self.terminal = _is_terminal(self.stream) if terminal is None else terminal
        self.done = 0.0
        self.started = clock()
        self.last_line_at: float | None = None
        self.lines_written = 0
        self.bar_drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._autostart = autostart
        self.in_flight = in_flight  # work under way not yet advanced (bytes read of files not done), or None

    # ---- the work's side --------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        self.started = self.clock()
        if self._autostart:
            self.start()
        return self

    def start(self) -> None:
        """Start redrawing (``autostart=False`` leaves it to the caller: after forking its workers)."""
        if not self.quiet and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpudiag-progress", daemon=True)
            self._thread.start()

    def advance(self, amount: float = 1) -> None:
        with self._lock:
            self.done = min(self.total, self.done + amount) if self.total else self.done + amount

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.quiet:
            return
        with self._lock:
            now = self.clock()
            if self.bar_drawn:  # the finished bar (or, when the work failed, just the end of its line)
                self._write(("\r" + self.bar(now) if exc_type is None else "") + "\n")
            elif self.lines_written and exc_type is None:  # a failed read says so itself, not "100 %"
                self._write(self.line(now) + "\n")

    # ---- drawing ----------------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        """Draw if it is time to: the bar after ``show_after_s``, or a line every ``line_every_s``."""
        if self.quiet:
            return
        with self._lock:
            now = self.clock() if now is None else now
            elapsed = now - self.started
            # a terminal's bar after show_after_s; a CI log's first line only after a whole interval, so a
            # refusal or error a few seconds in is the only thing the log says
            if elapsed < (self.show_after_s if self.terminal else max(self.show_after_s, self.line_every_s)):
                return
            if self.terminal:
                self._write("\r" + self.bar(now))
                self.bar_drawn = True
            elif self.last_line_at is None or now - self.last_line_at >= self.line_every_s:
                self._write(self.line(now) + "\n")
                self.last_line_at = now
                self.lines_written += 1

    def _so_far(self) -> float:
        """What is done, with the work under way: a 1 GB trace read alone moves the bar as it is read."""
        done = self.done
        if self.in_flight is not None:
            try:
                done += float(self.in_flight())
            except Exception:  # noqa: BLE001 - a display must not stop the work
                self.in_flight = None
        return min(done, self.total) if self.total else done

    def bar(self, now: float) -> str:
        share = self._so_far() / self.total if self.total else 0.0
        filled = int(round(share * BAR_CELLS))
        return (
            f"{self.what} [{'#' * filled}{'.' * (BAR_CELLS - filled)}] {100 * share:3.0f}%"
            f"  {self._amount()}  {now - self.started:.0f} s"
        )

    def line(self, now: float) -> str:
        share = self._so_far() / self.total if self.total else 0.0
        return f"gpudiag: {self.what}: {100 * share:.0f}% ({self._amount()}) after {now - self.started:.0f} s"

    def _amount(self) -> str:
        done = self._so_far()
        if self.unit == "bytes":
            return f"{done / 2**20:,.0f} of {self.total / 2**20:,.0f} MiB"
        return f"{done:,.0f} of {self.total:,.0f} {self.unit}"

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed, broken or absent stderr must not stop the work
            self.quiet = True

    def _run(self) -> None:
        period = self.redraw_every_s if self.terminal else min(self.redraw_every_s, self.line_every_s)
        while not self._stop.wait(period):
            self.tick()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
