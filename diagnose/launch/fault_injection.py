"""Fault-injection hooks for gpudiag's own fault tests. Inert unless GPUDIAG_FAULT_INJECT is set.

A kill at a chosen instant of a write (halfway through a line, halfway through a temporary
file) cannot be hit reliably from outside by timing, so the fault tests
(tests/launch/test_faults_kill.py) ask the writer itself to die there:

    GPUDIAG_FAULT_INJECT=jsonl-line@12   SIGKILL this process halfway through the 12th line it appends
                                         to a JSONL file (events/stats; event_log.JsonlAppender)
    GPUDIAG_FAULT_INJECT=snapshot        SIGKILL halfway through writing the allocator snapshot's
                                         temporary file (runtime/memory_capture.write_snapshot)

``@N`` means the N-th time the point is reached in this process (default: the first);
several points may be given, comma-separated. The variable is read once, at import; when it
is unset every check is one falsy test. Never set it outside tests. Standard library only
(loaded inside the user's training process).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "GPUDIAG_FAULT_INJECT"
POINTS = ("jsonl-line", "snapshot")


def parse(text: str) -> dict[str, int]:
    """``"jsonl-line@12,snapshot"`` → ``{"jsonl-line": 12, "snapshot": 1}`` (unknown points are kept; they never fire)."""
    armed = {}
    for item in (text or "").split(","):
        name, _, count = item.strip().partition("@")
        if name:
            armed[name] = int(count) if count.strip().isdigit() else 1
    return armed


_ARMED = parse(os.environ.get(ENV, ""))
_HITS: dict[str, int] = {}


def armed() -> bool:
    """True when a test asked for a fault in this process (writers then take their slow, countable path)."""
    return bool(_ARMED)


def due(point: str) -> bool:
    """Count one pass through ``point``; True when this is the pass the test asked to fail."""
    if not _ARMED:
        return False
    _HITS[point] = _HITS.get(point, 0) + 1
    return _ARMED.get(point) == _HITS[point]


def write_half_and_die(fd: int, data: bytes) -> None:
    """Write the first half of ``data`` to the open file descriptor ``fd``, then SIGKILL this process."""
    os.write(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # SIGKILL is delivered before this returns
