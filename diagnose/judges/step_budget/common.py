"""What every step_budget judge uses: the analyzer's name and report section, which every finding carries, the
severity a share of the step earns, and a location's short name for titles."""

from __future__ import annotations

from diagnose.findings import Severity
from diagnose.thresholds import Thresholds

NAME = "step_budget"  # the analyzer every finding of these judges belongs to (diagnose/analyzers/step_budget.py)
SECTION = "section-step_budget"


def severity_of(share: float | None, th: Thresholds) -> Severity:
    """The severity of a cost share: warning from ``cause_warning_share``, critical from ``cause_critical_share``,
    info under them or when no share is known (None)."""
    return Severity.of(share, warning=th.step_budget.cause_warning_share, critical=th.step_budget.cause_critical_share)


def short_location(location: str | None) -> str:
    """``train.py:88`` of ``/abs/path/train.py:88``, for titles (subjects keep the full path)."""
    if not location:
        return "an unknown line"
    file, _, line = location.rpartition(":")
    return f"{file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}" if file else location
