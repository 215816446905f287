"""Findings: what an analyzer concluded, with the evidence and what to do.

A :class:`Finding` is the unit of the report and of the findings JSON
(``gpudiag.findings/1``, see ``docs/findings-json.md``). Its ``id`` is stable
(``<analyzer>.<what>``) so CI can allow-list or track it across runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
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

    @classmethod
    def of(
        cls,
        value: float | None,
        *,
        warning: float | None = None,
        critical: float | None = None,
        lower_is_worse: bool = False,
        strict: bool = False,
        otherwise: Severity | None = INFO,
    ) -> Severity | None:
        """The severity ``value`` earns against its cut-offs: the one home of every analyzer's and judge's
        "critical from X, warning from Y", so each keeps its comparison in one word rather than an inline ternary.

        A value reaches a cut-off at or above it (at or below with ``lower_is_worse``); with ``strict`` only
        beyond it (``>``, ``<``), so a value equal to the cut-off does not. ``critical`` is tried first, then
        ``warning``; a cut-off left None is never reached. A value that reaches neither, NaN or None gets
        ``otherwise``: INFO, or WARNING where the caller has already judged the value a problem, or None
        where passing means no severity at all (:func:`band`)."""
        if value is not None and value == value:  # NaN and None reach no cut-off
            for severity, cut in ((cls.CRITICAL, critical), (cls.WARNING, warning)):
                if cut is None:
                    continue
                if lower_is_worse:
                    reached = value < cut if strict else value <= cut
                else:
                    reached = value > cut if strict else value >= cut
                if reached:
                    return severity
        return None if otherwise is None else cls(otherwise)  # the default INFO is the member's value, 0, here


def band(value: float | None, warning: float, critical: float, lower_is_worse: bool = True) -> Severity | None:
    """The severity of a kernel metric against its two bands (l2's hit-rate bands): only a value strictly beyond
    a band is in it, and one that passes both (or NaN, or None) has none."""
    return Severity.of(
        value, warning=warning, critical=critical, lower_is_worse=lower_is_worse, strict=True, otherwise=None
    )


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
    # what cost_share is a share of, in the verdict's words, where it is not its analyzer's declared basis (the idle
    # and sync findings of a run with untraced step timings: "the median step", diagnose.derive.untraced_cost)
    cost_basis: str | None = None

    def to_json(self) -> dict:
        out = {
            "id": self.id,
            "analyzer": self.analyzer,
            "severity": self.severity.label,
            "title": self.title,
            "cost_share": jsonable(self.cost_share),
            "subjects": [s.to_json() for s in self.subjects],
            "evidence": [e.to_json() for e in self.evidence],
            "recommendation": self.recommendation,
        }
        if self.cost_basis is not None:
            out["cost_basis"] = self.cost_basis
        return out


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


@dataclass(frozen=True)
class AnalyzerDescription:
    """What one analyzer module says about itself (its ``NAME``, ``TITLE``, ``JUDGES``, ``COST_BASIS``, ...), as
    ``diagnose.analyze()`` puts it on the Analysis: the report's section headings, the verdict's "judged ..." and
    the basis of each finding's cost are read from here, so adding an analyzer is adding its module."""

    name: str
    title: str  # its report section's heading
    judges: str  # what "Nothing crossed a threshold: judged ..." names
    cost_basis: str  # what its findings' cost_share is a share of, as the verdict says it ("the median step")
    section: str  # the anchor of its report section
    thresholds: tuple[str, ...] = ()  # the groups of diagnose.thresholds.Thresholds it reads
    finding_ids: tuple[str, ...] = ()  # every id it can produce
    cost_basis_by_id: tuple[tuple[str, str], ...] = ()  # (finding id, basis) where a finding's basis differs
    cause_ids: tuple[str, ...] = ()  # its findings that name a cause the user can fix (rank_findings)
    symptom_ids: tuple[str, ...] = ()  # its findings that say what the GPU or the step looks like, not why
    shows_step_budget: bool = False  # its finding, leading the verdict, names a cause of the step: show the step's bar

    def cost_of(self, finding_id: str) -> str:
        """What the cost_share of the finding ``finding_id`` is a share of, in the verdict's words."""
        return dict(self.cost_basis_by_id).get(finding_id, self.cost_basis)


@dataclass(frozen=True)
class Cause:
    """Where time went: the GPU busy on one kind of work, or idle for one reason. The idle analyzer's gap causes,
    the step budget's parts, the verdict's budget bar and words, and the report's colours (reports/figures.py
    ``CAUSE_COLORS``) all name a cause by its ``id``, defined once in :data:`CAUSES`."""

    id: str
    label: str  # as a budget bar's legend says it: "GPU idle: held by host syncs"
    busy: bool  # GPU busy (compute, copies, collectives), not idle for a reason
    words: str = ""  # as the verdict says an idle cause after "mostly": "host syncs" (idle's gap causes only)
    aliases: tuple[str, ...] = ()  # what a table calls it instead: the step budget's parts (its summary keys)


CAUSES = (  # in the order a budget shows them
    Cause("compute", "GPU busy: compute", True),
    Cause("non_compute", "GPU busy: copies and memsets", True, aliases=("memcpy",)),
    Cause("collective", "GPU busy: collectives", True),
    Cause("input", "GPU idle: waiting for input (DataLoader or the loop's iterator)", False),
    Cause("sync", "GPU idle: held by host syncs", False, "host syncs"),
    Cause(
        "host",
        "GPU idle: waiting for the host to launch work",
        False,
        "waiting for the host to launch work",
        aliases=("launch_bound",),
    ),
    Cause("short", "GPU idle: short gaps between kernels", False, "short gaps between kernels"),
    Cause(
        "other",
        "GPU idle: waiting on other streams or events",
        False,
        "waiting on other streams or events",
        aliases=("other_wait",),
    ),
    Cause(
        "unlinked",
        "GPU idle: cause not in the trace (no kernel linked to its launch)",
        False,
        "for a cause the trace cannot show",
    ),
    Cause("allocator", "GPU idle: allocator (cudaMalloc/cudaFree)", False),
    Cause("trace_window", "gpudiag's own trace window", False),
    Cause("unexplained", "unexplained", False),
)
_CAUSE_BY_NAME = {name: c for c in CAUSES for name in (c.id, *c.aliases)}


def cause_of(name: str) -> Cause | None:
    """The cause a name stands for, by its id or an alias (the step budget's ``launch_bound`` is ``host``)."""
    return _CAUSE_BY_NAME.get(name)


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


def rank_findings(
    findings: list[Finding],
    cause_ids: Iterable[str] = (),
    symptom_ids: Iterable[str] = (),
    recoverable_ms: Callable[[Finding], float] | None = None,
) -> list[Finding]:
    """Most costly first: severity, then estimated cost share, then id for determinism.

    Within a severity, a symptom ranks after the other findings when a root cause of at least that severity
    is present: the cause is what the user can fix. Which findings are causes and which symptoms, each analyzer
    declares (``CAUSE_FINDING_IDS``, ``SYMPTOM_FINDING_IDS``; :class:`AnalyzerDescription`): on the H200 an
    input-bound script read "GPU ran kernels only 1 % of the time" and "waiting for the host to launch work" first,
    with the DataLoader wait that caused both third (issue 18).

    With ``recoverable_ms`` (the run's milliseconds a finding's cost stands for; a run budget was measured), the
    warning and critical findings rank by it instead, the demoted symptoms after every cause, and the info findings
    after them all: shares of different bases (the run, the median step, the traced time) are not comparable, and
    on the H200 a char-level GPT's 11.9 % evaluation (2.3 s of the run) read fifth, behind a critical "GPU idle"
    that restated the launch-bound cause and a 16.6 % sync of the median step worth 1 s (issue 30).
    """
    cause_ids, symptom_ids = frozenset(cause_ids), frozenset(symptom_ids)
    cause_severity = max((int(f.severity) for f in findings if f.id in cause_ids), default=None)

    def demoted(f: Finding) -> bool:
        return cause_severity is not None and f.id in symptom_ids and int(f.severity) <= cause_severity

    def key(f: Finding):
        return (-int(f.severity), demoted(f), -(f.cost_share or 0.0), f.id)

    def run_key(f: Finding):
        if f.severity < Severity.WARNING:
            return (2, 0.0, *key(f))
        return (int(demoted(f)), -recoverable_ms(f), *key(f))

    return sorted(findings, key=key if recoverable_ms is None else run_key)


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
