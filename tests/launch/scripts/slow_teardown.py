"""Hand-made test script: a few marked steps, then a teardown that outlasts gpudiag's flush; argv: teardown_s.

The atexit hook is registered before the first step, so it runs after gpudiag's flush (atexit runs hooks last in,
first out): the process has written its end record and goes on, as one stuck in CUDA's or a library's shutdown."""

import atexit
import sys
import time

import diagnose

atexit.register(time.sleep, float(sys.argv[1]))
for _ in range(5):
    time.sleep(0.01)
    diagnose.step()
