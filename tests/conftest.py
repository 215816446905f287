"""The whole suite's hooks: after the run, the skipped tests counted by reason (CI prints it; see .ci/run).

pytest's ``-rs`` lists one line per skipped test; a count per reason shows at a glance what a machine could not run
(on a clone without a GPU: the GPU tests and the tests for another Python version only)."""

from __future__ import annotations

from collections import Counter


def skip_reason(report) -> str:
    """The reason a skipped test gave (``pytest.skip(reason)``, ``importorskip``, ``skipif``)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    if not skipped:
        return
    counts = Counter(skip_reason(r) for r in skipped)
    terminalreporter.write_sep("-", f"skipped {len(skipped)}, by reason")
    for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"skipped {n}: {reason}")
