"""Hand-made test script: a loop of sleeps marked with diagnose.step(), no framework; argv: steps sleep_s."""

import sys
import time

import diagnose

steps, sleep_s = int(sys.argv[1]), float(sys.argv[2])
for i in range(steps):
    time.sleep(sleep_s)
    diagnose.step()
    print(f"step {i}", flush=True)
