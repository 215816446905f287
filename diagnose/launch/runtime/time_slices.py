"""Fixed time slices: the last step source, for a loop that no other source sees.

A script with no ``diagnose.step()``, no torch optimizer, no backward pass and no repeatedly dispatched
jitted function (an inference loop, a custom C++ extension's training loop) would otherwise have no steps:
no trace window, no allocator snapshot, no NVTX step ranges for ``--ncu``. When no other source has ended
a step ``START_AFTER_S`` after the framework's import, a step boundary is taken every ``SLICE_S``, and each
such step says so (source ``"time"``; the report calls them time slices, not iterations).

The boundary must run on the main thread: it records a CUDA event on the current device and stream
(under torchrun a timer thread's device is GPU 0, the wrong one for every other rank) and opens the
profiler there. So a watcher thread asks the main thread to run it, through ``_thread.interrupt_main`` with a
real-time signal nobody else uses: no OS signal is sent (no system call is interrupted); Python runs the
handler on the main thread at its next bytecode. A boundary is skipped while a CUDA graph is being captured.
A real source that appears later takes over, and the watcher ends.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

START_AFTER_S = 30.0  # no step from any other source this long after the framework import: slice by time
SLICE_S = 1.0
POLL_S = 0.25
SIGNAL = getattr(signal, "SIGRTMIN", 34) + 7  # a real-time signal no library we know of handles
ENV_START_AFTER_S = "GPUDIAG_TIME_SLICES_AFTER_S"  # seconds before slicing starts; "off": never slice


def start_after_from_env(environ=os.environ) -> float | None:
    """``START_AFTER_S``, or what ``GPUDIAG_TIME_SLICES_AFTER_S`` says; None when it says off (or is not a number)."""
    text = environ.get(ENV_START_AFTER_S, "").strip().lower()
    if not text:
        return START_AFTER_S
    if text == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


class TimeSlices:
    """Watches for steps; with none after ``START_AFTER_S``, has the main thread take a boundary every ``SLICE_S``."""

    def __init__(self, steps, start_after_s: float = START_AFTER_S, slice_s: float = SLICE_S):
        self._steps = steps
        self.start_after_s = start_after_s
        self.slice_s = slice_s
        self._stop = threading.Event()
        self._thread = None
        self.slicing = False

    def arm(self) -> bool:
        """Install the handler and start the watcher; False where it cannot (not the main thread, the signal taken)."""
        if self._thread is not None:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
                return False
            signal.signal(SIGNAL, self._on_signal)
        except (ValueError, OSError):
            return False
        self._thread = threading.Thread(target=self._watch, name="gpudiag-time-slices", daemon=True)
        self._thread.start()
        return True

    def disarm(self) -> None:
        self._stop.set()
        try:
            if signal.getsignal(SIGNAL) == self._on_signal:
                signal.signal(SIGNAL, signal.SIG_DFL)
        except (ValueError, OSError):  # not the main thread: the handler stays, and does nothing once stopped
            pass

    def _watch(self) -> None:
        steps = self._steps
        started = time.monotonic()
        while not self._stop.wait(POLL_S):
            if steps.other_source_seen or steps._runtime.disabled:
                return
            if time.monotonic() - started >= self.start_after_s:
                break
        self.slicing = True
        while not self._stop.wait(self.slice_s):
            if steps.other_source_seen or steps._runtime.disabled:
                return
            try:
                _thread.interrupt_main(SIGNAL)
            except (ValueError, RuntimeError):
                return

    def _on_signal(self, signum, frame) -> None:
        if self._stop.is_set() or self._steps.other_source_seen:
            return
        if _mid_boundary_or_import(self._steps, frame):  # the next slice takes it
            return
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
                return
        except Exception:
            pass
        self._steps.boundary("time")


def _mid_boundary_or_import(steps, frame) -> bool:
    """True when the main thread was interrupted inside a boundary that holds the runtime's lock, or inside an import.

    The handler runs at the main thread's next bytecode, wherever that is. On an H100 under ``--ncu`` (2026-12-06)
    a JAX script's first time slice wired the parts, which imports torch for the NVTX ranges; ncu made that import
    take seconds, the next slice ran inside it and read ``torch.cuda`` of a torch still being imported, and the run
    lost its instrumentation. The same would happen inside the script's own slow ``import torch``."""
    is_owned = getattr(steps._lock, "_is_owned", None)
    if is_owned is not None and is_owned():
        return True
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
