"""Hand-made test script: ignores SIGTERM and SIGINT, then loops sleeps marked with diagnose.step(); argv: steps sleep_s."""

import signal
import sys
import time

import diagnose

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
steps, sleep_s = int(sys.argv[1]), float(sys.argv[2])
for _ in range(steps):
    time.sleep(sleep_s)
    diagnose.step()
