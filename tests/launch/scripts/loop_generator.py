"""Hand-made test script: a loop fed by a generator that takes 20 ms an item, 5 ms of work a step, diagnose.step()
marking the steps. No torch, no DataLoader: under Python 3.12+ light mode times the loop's for statement
(diagnose/launch/runtime/loop_input.py). argv: steps (default 12)."""

import sys
import time

import diagnose


def batches():
    while True:
        time.sleep(0.02)
        yield 1


for i, _batch in enumerate(batches()):
    if i == int(sys.argv[1] if len(sys.argv) > 1 else 12):
        break
    time.sleep(0.005)
    diagnose.step()
