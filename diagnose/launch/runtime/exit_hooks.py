"""Flush what was captured when the process ends: normally, by exception, or by SIGTERM/SIGHUP.

atexit covers a normal end, an uncaught exception and Ctrl-C (KeyboardInterrupt
unwinds to the interpreter's exit). SIGTERM and SIGHUP kill a Python process without
atexit, so a handler flushes first and then does what was there before: calls the
user's handler, or restores the default and re-sends the signal so the process still
dies of it (exit status 128+N, as without gpudiag). An ignored signal stays ignored.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading

FLUSH_SIGNALS = ("SIGTERM", "SIGHUP")


def install(flush) -> None:
    """Call ``flush()`` once at exit; chain the termination signals (main thread only)."""
    owner_pid = os.getpid()
    done = threading.Event()

    def flush_once():
        if done.is_set() or os.getpid() != owner_pid:  # forked children (DataLoader workers) flush nothing
            return
        done.set()
        flush()

    atexit.register(flush_once)
    if threading.current_thread() is not threading.main_thread():
        return
    for name in FLUSH_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        previous = signal.getsignal(signum)
        if previous in (signal.SIG_IGN, None):
            continue
        signal.signal(signum, _chained_handler(signum, previous, flush_once))


def _chained_handler(signum, previous, flush_once):
    def handler(received, frame):
        try:
            flush_once()
        except Exception:
            pass
        if callable(previous) and previous is not signal.default_int_handler:
            previous(received, frame)
            return
        if previous is signal.default_int_handler:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return handler
