"""Hand-made test script: end in the way argv[1] says (code N, raise, sigterm, sleep)."""

import os
import signal
import sys
import time

how = sys.argv[1]
if how == "raise":
    raise ValueError("planted failure")
if how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
if how == "sleep":
    time.sleep(float(sys.argv[2]))
sys.exit(int(how))
