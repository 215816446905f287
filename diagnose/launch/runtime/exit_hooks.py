"""Flush what was captured when the process ends: normally, by exception, or by SIGTERM/SIGHUP.

atexit covers a normal end, an uncaught exception and Ctrl-C (KeyboardInterrupt
unwinds to the interpreter's exit). SIGTERM and SIGHUP kill a Python process without
atexit, so a handler flushes first and then does what was there before: calls the
user's handler, or restores the default and re-sends the signal so the process still
dies of it (exit status 128+N, as without gpudiag). An ignored signal stays ignored.

A signal that comes while the flush runs (atexit's at the script's normal end, or the first signal's) waits for it:
the handler runs on top of the flush, and dying there cut the flush short. On an H100 (2026-12-06) a script under
``--ncu`` ended on its own just as ``--after-window stop``'s SIGTERM came: the run lost its allocator snapshot and
the end of its step log. Once the flush is done, the process dies of the signal that waited (128+N).

Under ncu the script's SIGTERM handler did not run: on an H100 (2026-12-06, tools/ncu_signal_probe.py) a CUDA script
under ncu 2025.3 whose process group (ncu's own process included) got SIGTERM ended with exit 0, and neither its
handler nor atexit ran, so every run that --after-window stop or --ncu-timeout ended lost its snapshot and the end
of its step log. A real-time signal reaches the script's handler there. So ``STOP_SIGNAL`` (when no one else handles it) is a request to stop: flush, then
SIGTERM to itself. install returns it, and the runtime writes it in a ``stop-signal`` record, which is how
ncu_mode's stopper knows which processes to send it to (for any other process its default action is to die at once).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading

FLUSH_SIGNALS = ("SIGTERM", "SIGHUP")
# SIGRTMIN + 7 is time_slices.SIGNAL; + 8 reached a Python handler under ncu on the H100 (tools/ncu_signal_probe.py)
STOP_SIGNAL = getattr(signal, "SIGRTMIN", 34) + 8


def install(flush) -> int | None:
    """Call ``flush()`` once at exit; chain the termination signals and take STOP_SIGNAL (main thread only).
    Returns STOP_SIGNAL where its handler is in place, else None."""
    owner_pid = os.getpid()
    done = threading.Event()  # the flush has begun
    flushed = threading.Event()  # ... and ended
    waiting = []  # signals that came during the flush, sent again after it
    taken = []  # the STOP_SIGNAL handler this install put in place, if any

    def flush_once():
        if done.is_set() or os.getpid() != owner_pid:  # forked children (DataLoader workers) flush nothing
            return
        done.set()
        try:
            flush()
        finally:
            flushed.set()
            if taken:
                _ignore_stop_signal(taken[0])
            if waiting:
                _die_of(waiting[0])

    def flush_or_wait(signum) -> bool:
        """Flush (once); False when the flush is under way below this handler: the signal waits for its end."""
        if done.is_set() and not flushed.is_set() and os.getpid() == owner_pid:
            waiting.append(signum)
            return False
        flush_once()
        return True

    atexit.register(flush_once)
    if threading.current_thread() is not threading.main_thread():
        return None
    for name in FLUSH_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        previous = signal.getsignal(signum)
        if previous in (signal.SIG_IGN, None):
            continue
        signal.signal(signum, _chained_handler(signum, previous, flush_or_wait))
    handler = _take_stop_signal(flush_or_wait)
    if handler is None:
        return None
    taken.append(handler)
    return STOP_SIGNAL


def _take_stop_signal(flush_or_wait):
    """STOP_SIGNAL's handler, put in place: flush, then SIGTERM to this process, which then does what its SIGTERM
    disposition says (the script's handler or the default; ncu ends it); None where the signal is someone else's."""
    if not hasattr(signal, "SIGRTMIN"):
        return None

    def stop(received, frame):
        try:
            if not flush_or_wait(signal.SIGTERM):
                return  # the flush under way below this frame dies of SIGTERM at its end
        except Exception:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        if signal.getsignal(STOP_SIGNAL) not in (signal.SIG_DFL, None):
            return None
        signal.signal(STOP_SIGNAL, stop)
    except (ValueError, OSError):
        return None
    return stop


def _ignore_stop_signal(handler) -> None:
    """After the flush a stop request is moot: STOP_SIGNAL is ignored from here on. Python's finalization, which
    follows atexit's flush, puts a Python handler's signal back to its default action, and for a real-time signal that
    is to die: a stop that came then killed the script at its normal end (exit -42 under the CPU tests' fake ncu). An
    ignored signal stays ignored."""
    try:
        if signal.getsignal(STOP_SIGNAL) is handler:  # still ours (the script may have taken it since)
            signal.signal(STOP_SIGNAL, signal.SIG_IGN)
    except (ValueError, OSError, TypeError):  # not the main thread, or no such signal here
        pass


def _chained_handler(signum, previous, flush_or_wait):
    def handler(received, frame):
        try:
            if not flush_or_wait(signum):
                return  # the flush below this frame goes on, then sends the signal again (flush_once)
        except Exception:
            pass
        if callable(previous) and previous is not signal.default_int_handler:
            previous(received, frame)
            return
        if previous is signal.default_int_handler:
            raise KeyboardInterrupt
        _die_of(signum)

    return handler


def _die_of(signum) -> None:
    """End the process by ``signum`` at its default action, so its exit status says so (128+N)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
