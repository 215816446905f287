"""FAKE: what Nsight Compute 2025.3 did to a script's SIGTERM, for tests/launch/fake_ncu/ncu with FAKE_NCU_TAKES_SIGTERM=1.

On an H100 (2026-12-06, tools/ncu_signal_probe.py) a CUDA script under ncu that got SIGTERM ended with exit 0, and
neither its own SIGTERM handler nor atexit ran; a real-time signal did reach its handler. This runs the script
(argv[1:]) as ``__main__`` with SIGTERM taken the same way: a handler that calls ``os._exit(0)``, and
``signal.signal(SIGTERM, ...)`` calls that change nothing. Other signals are untouched.
"""

import os
import runpy
import signal
import sys

_install = signal.signal


def _signal(signum, handler):
    if signum == signal.SIGTERM:
        return signal.getsignal(signum)
    return _install(signum, handler)


_install(signal.SIGTERM, lambda signum, frame: os._exit(0))
signal.signal = _signal
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
