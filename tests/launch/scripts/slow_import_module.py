"""Hand-made test module (tests/launch/test_run_budget_records.py): takes 50 ms to import, the time the import's
record must hold at least."""

import time

time.sleep(0.05)
