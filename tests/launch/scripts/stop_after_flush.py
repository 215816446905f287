"""Hand-made test script: a few marked steps; at exit, after gpudiag's flush, it sends itself gpudiag's stop signal.

The atexit hook is registered before the first step, so it runs after gpudiag's (last in, first out): a stop that
comes once everything is flushed, as --ncu's stopper's may while the script ends on its own."""

import atexit
import os
import signal
import time

import diagnose


def stop_late():
    os.kill(os.getpid(), signal.SIGRTMIN + 8)
    time.sleep(0.2)  # a Python handler would run here
    print("survived the late stop", flush=True)


atexit.register(stop_late)
for _ in range(5):
    time.sleep(0.01)
    diagnose.step()
