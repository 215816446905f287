"""Input wait of a loop over any iterable (Python 3.12+): the time its ``for`` statement waits for the next item.

A torch DataLoader's fetches are timed by wrapping its ``__next__`` (input_wait). A generator, a class with
``__next__`` or ``zip(...)`` cannot be wrapped from outside, but the loop that asks them for items can be
watched: with ``sys.monitoring`` (PEP 669), local events on the training loop's code object only. At the
end of each iteration the loop jumps back to its ``FOR_ITER`` instruction (a JUMP event whose destination
is that instruction), and ``FOR_ITER`` branches into the body once the iterator has returned an item (a
BRANCH event at that instruction): the time between the two is the fetch. When the loop starts over (each
epoch of ``for epoch ...: for batch in batches(): ...``), the fetch is timed from its ``GET_ITER`` (an
INSTRUCTION event), so a new iterator's first, often slowest, item is counted. Every other jump, branch or
instruction of the loop's code is switched off at its first event (``DISABLE``), so a step costs two callbacks. Nothing in the
data is touched. Before Python 3.12 there is no such hook and this does nothing.

The loop is found at a step boundary: from the boundary's caller outwards, the first frame of the user's
own code (not gpudiag, torch, jax, an installed package or the standard library) that is inside a ``for``
loop. The step's ``input_ms`` comes from here only when the step fetched nothing from a DataLoader.
"""

from __future__ import annotations

import dis
import sys
import threading
import time

TOOL_IDS = (4, 3)  # sys.monitoring ids no CPython tool claims (0-2: debugger, coverage, profiler; 5: optimizer)
TOOL_NAME = "gpudiag-loop-input"
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/lib64/python3", "/diagnose/launch/")
LIBRARY_PREFIXES = ("<",)


def available() -> bool:
    return hasattr(sys, "monitoring")


def is_user_code(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return not name.startswith(LIBRARY_PREFIXES) and not any(part in name for part in LIBRARY_PARTS)


def enclosing_for_iter(code, lasti: int) -> int | None:
    """Offset of the innermost ``FOR_ITER`` whose body holds the instruction at ``lasti``, or None."""
    best = None
    for ins in dis.get_instructions(code):
        if ins.opname == "FOR_ITER" and isinstance(ins.argval, int) and ins.offset < lasti < ins.argval:
            if best is None or ins.offset > best:
                best = ins.offset
    return best


def get_iter_before(code, for_iter: int) -> int | None:
    """Offset of the ``GET_ITER`` right before the loop's ``FOR_ITER`` (where the loop starts over a new iterator)."""
    previous = None
    for ins in dis.get_instructions(code):
        if ins.offset == for_iter:
            return previous.offset if previous is not None and previous.opname == "GET_ITER" else None
        previous = ins
    return None


def find_loop(frame) -> tuple[object, int] | None:
    """(code, FOR_ITER offset) of the training loop around ``frame``'s call, walking outwards through user frames."""
    depth = 0
    while frame is not None and depth < 64:
        code = frame.f_code
        if is_user_code(code.co_filename):
            offset = enclosing_for_iter(code, frame.f_lasti)
            if offset is not None:
                return code, offset
        frame, depth = frame.f_back, depth + 1
    return None


def _branch_events() -> int:
    """BRANCH, or from Python 3.14 its two halves (BRANCH is deprecated there)."""
    events = sys.monitoring.events
    return getattr(events, "BRANCH_LEFT", 0) | getattr(events, "BRANCH_RIGHT", 0) or events.BRANCH


def _watched_events() -> int:
    events = sys.monitoring.events
    return events.JUMP | _branch_events() | events.INSTRUCTION


class LoopInputWait:
    """Sums the time the training loop's ``for`` waits for its iterator, on the main thread."""

    def __init__(self, main_thread: int):
        self.total_ns = 0
        self.calls = 0  # items fetched (and the final StopIteration) since armed
        self._main_thread = main_thread
        self._code = None
        self._for_iter = -1
        self._get_iter = -1
        self._tool = None
        self._jump_ns = 0

    @property
    def armed(self) -> bool:
        return self._tool is not None

    def arm(self, frame) -> bool:
        """Watch the loop around ``frame`` (a step boundary's caller); False when there is none or no free tool id."""
        if not available() or self._tool is not None:
            return False
        found = find_loop(frame)
        if found is None:
            return False
        monitoring = sys.monitoring
        for tool in TOOL_IDS:
            try:
                monitoring.use_tool_id(tool, TOOL_NAME)
            except ValueError:  # another tool holds it
                continue
            break
        else:
            return False
        code, offset = found
        get_iter = get_iter_before(code, offset)
        self._code, self._for_iter, self._tool = code, offset, tool
        self._get_iter = -1 if get_iter is None else get_iter
        for event, callback in self._callbacks():
            monitoring.register_callback(tool, event, callback)
        monitoring.set_local_events(tool, code, _watched_events())
        return True

    def _callbacks(self) -> list[tuple[int, object]]:
        """(event, callback) of each event watched: JUMP, the branch event(s) and INSTRUCTION."""
        events, branch = sys.monitoring.events, _branch_events()
        branches = [getattr(events, n, 0) for n in ("BRANCH", "BRANCH_LEFT", "BRANCH_RIGHT")]
        return [
            (events.JUMP, self._on_jump),
            *((event, self._on_branch) for event in dict.fromkeys(branches) if event and event & branch),
            (events.INSTRUCTION, self._on_instruction),
        ]

    def rearm(self) -> None:
        """Set the loop's events again: a profiler's Python tracer (the trace window) switching legacy profiling on
        and off on Python 3.12 was seen to leave the ``GET_ITER`` instruction event off (each epoch's first fetch
        then read 0 ms)."""
        tool, code = self._tool, self._code
        if tool is None:
            return
        sys.monitoring.set_local_events(tool, code, 0)
        sys.monitoring.set_local_events(tool, code, _watched_events())

    def disarm(self) -> None:
        tool, code = self._tool, self._code
        self._tool = self._code = None
        if tool is None:
            return
        monitoring = sys.monitoring
        try:
            monitoring.set_local_events(tool, code, 0)
            for event, _ in self._callbacks():
                monitoring.register_callback(tool, event, None)
            monitoring.free_tool_id(tool)
        except Exception:
            pass

    def _on_instruction(self, code, offset):
        """The loop starting over a new iterator (a new epoch): its first fetch is timed from ``GET_ITER`` on."""
        return self._fetch_starts(code is self._code and offset == self._get_iter)

    def _on_jump(self, code, offset, destination):
        """The end of an iteration: the jump back to ``FOR_ITER``, where the next fetch starts."""
        return self._fetch_starts(code is self._code and destination == self._for_iter)

    def _fetch_starts(self, ours: bool):
        if not ours:
            return sys.monitoring.DISABLE  # another instruction or jump of the loop's code: never again
        if threading.get_ident() == self._main_thread:
            self._jump_ns = time.perf_counter_ns()
        return None

    def _on_branch(self, code, offset, destination):
        if code is not self._code or offset != self._for_iter:
            return sys.monitoring.DISABLE
        started = self._jump_ns
        if started and threading.get_ident() == self._main_thread:
            self.total_ns += time.perf_counter_ns() - started
            self.calls += 1
            self._jump_ns = 0
        return None
