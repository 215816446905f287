"""Each failed GPU test's report, printed as it fails.

The device call that runs tests/gpu has a time limit; pytest prints failures only at the end, so a run cut off by
the limit lost why its tests failed (2026-12-06: an H100 call ran out in the sixth of seven files, after two
failures). With ``-s`` the report goes to the log right after the test."""

from __future__ import annotations

import sys


def pytest_runtest_logreport(report):
    if report.failed:
        print(
            f"\n==== FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n====", file=sys.stderr, flush=True
        )
