"""Progress of a profiled run, read from the events files the children append to.

A thread tails every rank's events file (parsers.run_records.EVENTS) and, at most every ``interval_s``, prints one line
to stderr ("gpudiag: 120 steps (rank 0), median 8.10 ms/step") when something changed.
The same reader gives the numbers the end of the run needs: steps per rank and step times.

It also says once when every rank has flushed (its end record) but the script has not exited ``EXIT_HANG_NOTE_S``
later: the process is stuck in its teardown, after gpudiag's part. On an H100 (2026-12-06) a time-sliced CUDA loop
wrote its end record and had not exited 6 minutes later; gpudiag waited without a word.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from parsers.run_records import EVENTS, RUN_END, RUN_END_REASONS, RUN_START, RUN_STOP_SIGNAL, STEP, SYNC

EXIT_HANG_NOTE_S = 60.0  # every rank flushed this long ago and the script still runs: say so
ENV_EXIT_HANG_NOTE_S = "GPUDIAG_EXIT_HANG_NOTE_S"  # another number of seconds (tests)
CHECK_S = 1.0  # the printer's thread wakes this often (it prints progress every interval_s)


class EventsTail:
    """Incremental reader of every rank's events file: only whole new lines are parsed; of the records, the step and
    sync ones count (their kinds and fields are parsers.run_records')."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._offsets: dict[Path, int] = {}
        self.step_host_ms: dict[int, list[float]] = {}
        self.steps: dict[int, dict[int, float]] = {}  # rank → step → host_ms
        self.sync_count = 0
        self.started: set[int] = set()  # ranks with a start record
        self.ended_ns: dict[int, int] = {}  # rank → t_ns of its end record
        self.stop_signals: dict[int, int] = {}  # pid → the signal its runtime stops on (stop-signal records)

    def poll(self) -> None:
        for path in sorted(self.run_dir.glob(EVENTS.pattern)):
            offset = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[path] = offset + end + 1
            for line in data[:end].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                kind = record.get("kind")
                if kind == STEP.kind and isinstance(record.get("host_ms"), (int, float)):
                    rank = int(record.get("rank", 0))
                    self.steps.setdefault(rank, {})[int(record.get("step", 0))] = float(record["host_ms"])
                    if not record.get("instrumented"):
                        self.step_host_ms.setdefault(rank, []).append(float(record["host_ms"]))
                elif kind == SYNC.kind:
                    self.sync_count += 1
                elif RUN_START.is_kind_of(record):  # a rank started again (an elastic restart) has not ended
                    self.started.add(int(record.get("rank", 0)))
                    self.ended_ns.pop(int(record.get("rank", 0)), None)
                elif (
                    RUN_END.is_kind_of(record)
                    and record.get("reason") == RUN_END_REASONS[0]
                    and isinstance(record.get("t_ns"), int)
                ):
                    # the flush at the process's exit (a "context-exit" end is a profile() block's: the script goes on)
                    self.ended_ns[int(record.get("rank", 0))] = record["t_ns"]
                elif (
                    RUN_STOP_SIGNAL.is_kind_of(record)
                    and isinstance(record.get("pid"), int)
                    and isinstance(record.get("signal"), int)
                ):
                    self.stop_signals[record["pid"]] = record["signal"]

    def flushed_s_ago(self) -> float | None:
        """Seconds since the last rank's end record, once every rank that started has one; else None."""
        if not self.started or self.started - set(self.ended_ns):
            return None
        return time.time() - max(self.ended_ns.values()) / 1e9

    def step_count(self, rank: int = 0) -> int:
        return len(self.steps.get(rank, {}))

    def median_host_ms(self, rank: int = 0) -> float | None:
        values = self.step_host_ms.get(rank)
        return statistics.median(values) if values else None

    def host_ms_of(self, step: int, rank: int = 0) -> float | None:
        return self.steps.get(rank, {}).get(step)

    def summary(self) -> str:
        if not self.steps:
            return "no steps seen"
        rank = 0 if 0 in self.steps else min(self.steps)
        text = f"{self.step_count(rank)} steps (rank {rank})"
        median = self.median_host_ms(rank)
        if median is not None:
            text += f", median {median:.2f} ms/step"
        if len(self.steps) > 1:
            text += f", {len(self.steps)} ranks"
        return text


class ProgressPrinter:
    def __init__(self, tail: EventsTail, interval_s: float = 10.0, stream=None):
        self.tail = tail
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudiag-progress", daemon=True)
        self._last = None
        self._hang_note_s = exit_hang_note_s()
        self.said_hang = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_print = time.monotonic() + self.interval_s
        while not self._stop.wait(min(CHECK_S, self.interval_s)):
            if time.monotonic() >= next_print:
                next_print = time.monotonic() + self.interval_s
                self.print_if_changed()
            else:
                self._poll_quietly()
            self.note_exit_hang()

    def _poll_quietly(self) -> None:
        try:
            self.tail.poll()
        except Exception:
            pass

    def print_if_changed(self) -> None:
        try:
            self.tail.poll()
            text = self.tail.summary()
        except Exception:
            return
        if text != self._last and self.tail.steps:
            self._last = text
            print(f"gpudiag: {text}", file=self.stream, flush=True)

    def note_exit_hang(self) -> None:
        """Once: every rank flushed ``EXIT_HANG_NOTE_S`` ago and the script has not exited."""
        if self.said_hang:
            return
        waited = self.tail.flushed_s_ago()
        if waited is None or waited < self._hang_note_s:
            return
        self.said_hang = True
        ranks = "every rank" if len(self.tail.started) > 1 else "the script"
        print(
            f"gpudiag: {ranks} flushed its records {waited:.0f} s ago and the script has not exited: it is stuck in "
            "its teardown (an atexit hook, CUDA, NCCL or the profiler's shutdown, a thread that never ends). Nothing "
            "gpudiag captured is lost; Ctrl-C ends it.",
            file=self.stream,
            flush=True,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.tail.poll()


def exit_hang_note_s(environ=os.environ) -> float:
    """EXIT_HANG_NOTE_S, or the seconds ``GPUDIAG_EXIT_HANG_NOTE_S`` says."""
    try:
        value = float(environ.get(ENV_EXIT_HANG_NOTE_S, ""))
    except ValueError:
        return EXIT_HANG_NOTE_S
    return value if value >= 0 else EXIT_HANG_NOTE_S
