"""Progress of a profiled run, read from the events files the children append to.

A thread tails every rank's events file (parsers.run_records.EVENTS) and, at most every ``interval_s``, prints one line
to stderr ("gpudiag: 120 steps (rank 0), median 8.10 ms/step") when something changed.
The same reader gives the numbers the end of the run needs: steps per rank and step times.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
from pathlib import Path

from parsers.run_records import EVENTS, STEP, SYNC


class EventsTail:
    """Incremental reader of every rank's events file: only whole new lines are parsed; of the records, the step and
    sync ones count (their kinds and fields are parsers.run_records')."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._offsets: dict[Path, int] = {}
        self.step_host_ms: dict[int, list[float]] = {}
        self.steps: dict[int, dict[int, float]] = {}  # rank → step → host_ms
        self.sync_count = 0

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

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.print_if_changed()

    def print_if_changed(self) -> None:
        try:
            self.tail.poll()
            text = self.tail.summary()
        except Exception:
            return
        if text != self._last and self.tail.steps:
            self._last = text
            print(f"gpudiag: {text}", file=self.stream, flush=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.tail.poll()
