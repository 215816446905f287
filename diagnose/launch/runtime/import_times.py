"""Import time before the first step: each outermost ``import`` statement on the main thread, timed.

A run's seconds before its first step are mostly imports (torch, transformers, the user's own modules) and setup;
the run budget needs to tell them apart. From the runtime's install (just after the sitecustomize) until the first
step boundary, ``builtins.__import__`` is wrapped: on the main thread, the outermost call (a depth counter: the
imports an import makes are inside its time) is timed. Each one that took at least IMPORT_RECORD_MIN_MS gives a
``{"kind": "work", "what": "import", "name": "torch"}`` record (``name`` the module as written, ``location`` the
innermost user frame of the import statement); the shorter ones together give one record named
IMPORT_OTHERS (``t_ns`` the first one's start, ``ms`` their sum). They are written at the first step boundary, with
the other work held until then (coordinator.Runtime.write_record), step -1. The wrapper comes off at that boundary
(an import in progress then, one that runs the training itself, gives no record) and at the runtime's uninstall.

``importlib.import_module`` and imports on other threads do not pass here. Per call: two clock reads, a thread id
and a few attribute updates; every exception passes through unchanged.
"""

from __future__ import annotations

import builtins
import sys
import threading
import time

from parsers.run_records import (
    BEFORE_FIRST_STEP,
    IMPORT_OTHERS,
    IMPORT_RECORD_MIN_MS,
    WORK_IMPORT,
)

IMPORT_RECORD_MIN_NS = int(IMPORT_RECORD_MIN_MS * 1_000_000)
MAX_IMPORT_RECORDS = 1000  # imports long enough for a record of their own; later ones are summed with the others


class ImportTimes:
    """The ``builtins.__import__`` wrapper of one Runtime and what it timed."""

    def __init__(self, runtime, main_thread: int):
        self._runtime = runtime
        self._main_thread = main_thread
        self._on = False
        self._depth = 0
        self._original = None
        self._wrapper = None
        self.slow: list[tuple[int, int, str, object]] = []  # (t_ns, elapsed ns, name, location) of the long ones
        self.others_ns = 0  # summed time of the shorter outermost imports
        self.others_t_ns = None  # the first shorter one's start
        self.others_count = 0

    def install(self) -> None:
        if self._original is not None:
            return
        original = builtins.__import__
        times, get_ident, main, perf_ns, wall_ns = (
            self,
            threading.get_ident,
            self._main_thread,
            time.perf_counter_ns,
            time.time_ns,
        )

        def __import__(name, globals=None, locals=None, fromlist=(), level=0):
            if times._depth or not times._on or get_ident() != main:
                return original(name, globals, locals, fromlist, level)
            times._depth = 1
            t_ns = wall_ns()
            started_ns = perf_ns()
            try:
                return original(name, globals, locals, fromlist, level)
            finally:
                elapsed_ns = perf_ns() - started_ns
                if times._on:
                    if elapsed_ns < IMPORT_RECORD_MIN_NS or len(times.slow) >= MAX_IMPORT_RECORDS:
                        if times.others_t_ns is None:
                            times.others_t_ns = t_ns
                        times.others_ns += elapsed_ns
                        times.others_count += 1
                    else:
                        times._add_slow(name, level, globals, t_ns, elapsed_ns, sys._getframe(1))
                times._depth = 0

        __import__._gpudiag_original = original
        self._original, self._wrapper = original, __import__
        self._on = True
        builtins.__import__ = __import__

    def _add_slow(self, name, level, importer_globals, t_ns: int, elapsed_ns: int, frame) -> None:
        """A long import: the module's full name (a relative import's resolved against its package:
        ``jaxlib.mlir.dialects._mhlo_ops_gen``, not ``._mhlo_ops_gen``) and the user's line (the frame walk only for
        these). Never raises."""
        try:
            from diagnose.launch.runtime.periodic_work import caller_location

            self.slow.append((t_ns, elapsed_ns, absolute_name(name, level, importer_globals), caller_location(frame)))
        except Exception:
            self.others_ns += elapsed_ns
            self.others_count += 1

    def uninstall(self) -> None:
        """Stop timing; put the original ``__import__`` back unless someone wrapped it after us (ours then passes
        every call straight through)."""
        self._on = False
        original, wrapper = self._original, self._wrapper
        self._original = self._wrapper = None
        if original is not None and builtins.__import__ is wrapper:
            builtins.__import__ = original

    def finish(self) -> None:
        """At the first step boundary: uninstall, then hand the records to the runtime (held until its start
        record is written)."""
        from diagnose.launch.runtime.periodic_work import write_work

        self.uninstall()
        runtime = self._runtime
        for t_ns, elapsed_ns, name, location in self.slow:
            write_work(runtime, WORK_IMPORT, BEFORE_FIRST_STEP, t_ns, elapsed_ns, location, name=name)
        if self.others_t_ns is not None:
            write_work(
                runtime, WORK_IMPORT, BEFORE_FIRST_STEP, self.others_t_ns, self.others_ns, None, name=IMPORT_OTHERS
            )
        self.slow = []


def absolute_name(name, level, importer_globals) -> str:
    """The module a (possibly relative) import statement names: ``from ._x import y`` in package ``a.b`` is
    ``a.b._x``; as written (``._x``) where the package cannot be told."""
    written = "." * level + str(name or "") if isinstance(level, int) and level > 0 else str(name)
    if written.startswith("."):
        try:
            import importlib.util

            g = importer_globals if isinstance(importer_globals, dict) else {}
            package = g.get("__package__")
            if package is None and "__name__" in g:
                package = g["__name__"] if "__path__" in g else str(g["__name__"]).rpartition(".")[0]
            resolved = importlib.util.resolve_name(written, str(package)) if package else written
            return resolved.rstrip(".")
        except (ImportError, ValueError, TypeError):
            return written
    return written
