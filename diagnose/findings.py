"""Findings: what an analyzer concluded, with the evidence and what to do.

A :class:`Finding` is the unit of the report and of the findings JSON
(``gpudiag.findings/1``, see ``docs/findings-json.md``). Its ``id`` is stable
(``<analyzer>.<what>``) so CI can allow-list or track it across runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import pandas as pd

# the formatting layer, re-exported: reports/ takes from diagnose only this module's public names
from diagnose.formatting import (  # noqa: F401
    DURATION_SCALE_NS,
    MISSING,
    agree,
    bytes_human,
    cell_text,
    count_human,
    is_missing,
    label_of_key,
    ms_human,
    n_things,
    ns_human,
    number_human,
    offset_human,
    pct_human,
    plural_of,
    s_human,
    share_human,
    singular_of,
    unit_of_column,
    us_human,
    value_human,
)


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"severity must be one of info, warning, critical; got {text!r}") from None


@dataclass(frozen=True)
class Subject:
    """What a finding concerns: a kernel, a source location, a segment, a step, a rank."""

    kind: str  # kernel | location | segment | step | rank | collective | stream | op
    name: str
    severity: Severity | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "name": self.name}
        if self.severity is not None:
            out["severity"] = self.severity.label
        out.update({k: jsonable(v) for k, v in self.figures.items()})
        return out


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float
    unit: str
    threshold: float | None = None

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "value": jsonable(self.value),
            "unit": self.unit,
            "threshold": jsonable(self.threshold),
        }


@dataclass(frozen=True)
class Finding:
    id: str
    analyzer: str
    severity: Severity
    title: str
    subjects: tuple[Subject, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    cost_share: float | None = None  # estimated share of GPU/step time this costs, 0..1
    recommendation: str = ""
    section: str | None = None  # anchor of the report section holding the evidence

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "analyzer": self.analyzer,
            "severity": self.severity.label,
            "title": self.title,
            "cost_share": jsonable(self.cost_share),
            "subjects": [s.to_json() for s in self.subjects],
            "evidence": [e.to_json() for e in self.evidence],
            "recommendation": self.recommendation,
        }


@dataclass
class Result:
    """What one analyzer returns: findings, tables for the report, summary numbers.

    ``tables`` are plain DataFrames keyed by a short name; ``summary`` holds the
    whole-run figures that go into the findings JSON (names carry units).
    ``meta`` holds small non-tabular facts a report section needs (e.g. a GPU's SM count).
    """

    analyzer: str
    findings: list[Finding] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def within(subjects, severity: Severity) -> tuple[Subject, ...]:
    """``subjects`` with no severity above ``severity``, their finding's: a subject ranks within its finding, never
    above it (docs/findings-json.md). An info finding had read with a "critical" rank subject (issue 28)."""
    return tuple(
        s if s.severity is None or s.severity <= severity else Subject(s.kind, s.name, severity, s.figures)
        for s in subjects
    )


def not_measured(analyzer: str, what: str, how: str, section: str | None = None, plural: bool = False) -> Finding:
    """The info finding an analyzer returns when its input is missing (``plural``: ``what`` is a plural noun,
    "Kernel launch statistics were not measured")."""
    return Finding(
        id=f"{analyzer}.not_measured",
        analyzer=analyzer,
        severity=Severity.INFO,
        title=f"{what} {'were' if plural else 'was'} not measured",
        recommendation=how,
        section=section,
    )


# Findings that say what the GPU or the step time looks like, not why, and findings that name a cause
# those cannot see (the loop waiting in the DataLoader, stalls every N steps, the allocator). On the H200 an
# input-bound script read "GPU ran kernels only 1 % of the time" and "waiting for the host to launch work"
# first, with the DataLoader wait that caused both third (issue 18). The step budget's launch-bound and sync
# parts name the idle finding's causes on the median steady step, the basis the budget and the verdict share,
# where the idle finding covers the whole traced span, first step included (issue 28: "~99 % of step time" beside
# 79.0 % of the median step): they lead too.
SYMPTOM_IDS = frozenset({"utilization.low_gpu_util", "idle.gpu_idle", "steps.unstable", "launch.launch_bound"})
ROOT_CAUSE_IDS = frozenset(
    {
        "step_budget.input",
        "step_budget.periodic",
        "step_budget.allocator",
        "step_budget.compilation",
        "step_budget.new_shape",
        "step_budget.launch_bound",
        "step_budget.sync",
    }
)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Most costly first: severity, then estimated cost share, then id for determinism.

    Within a severity, a symptom ranks after the other findings when a root cause of at least that severity
    is present: the cause is what the user can fix. Demotion never moves a finding across severities.
    """
    cause_severity = max((int(f.severity) for f in findings if f.id in ROOT_CAUSE_IDS), default=None)

    def key(f: Finding):
        demoted = cause_severity is not None and f.id in SYMPTOM_IDS and int(f.severity) <= cause_severity
        return (-int(f.severity), demoted, -(f.cost_share or 0.0), f.id)

    return sorted(findings, key=key)


def jsonable(v: Any) -> Any:
    """``v`` as plain JSON data: numpy scalars unwrapped, NaN and infinities → None, keys as text."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict, str)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v
