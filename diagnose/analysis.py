"""Run every analyzer over a Profile and gather one :class:`Analysis`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnose.derive.derived import Derived
from diagnose.findings import AnalyzerDescription, Finding, Result, Severity, rank_findings
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import Metric, describe, in_match_order
from diagnose.thresholds import Thresholds


def every_description() -> dict[str, AnalyzerDescription]:
    from diagnose.analyzers import descriptions

    return descriptions()


@dataclass
class Analysis:
    """What reports render: per-analyzer results, findings ranked by cost, the summary, the source, and what each
    analyzer says about itself (``analyzers``: section headings, what it judges, its findings' cost basis)."""

    results: dict[str, Result] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Metric] = field(default_factory=dict)  # summary key -> its declaration (diagnose.metrics)
    verdict: Any = None  # diagnose.verdict.Verdict: the one-sentence answer, decided at the end of analyze()
    # name -> the analyzer's description (diagnose.analyzers.description_of); one built by hand describes every analyzer
    analyzers: dict[str, AnalyzerDescription] = field(default_factory=every_description)

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def _repr_html_(self) -> str:
        """What a notebook shows: the verdict and the findings table (reports/notebook.py), not the whole page."""
        from reports.notebook import render_notebook_html

        return render_notebook_html(self)


def analyze(
    profile: Profile,
    thresholds: Thresholds | None = None,
    only: list[str] | None = None,
    rank_parts: dict[tuple[str, int], Any] | None = None,
) -> Analysis:
    """Every analyzer over ``profile``. ``rank_parts``: the trace analyzers' per-rank parts worked out on a
    cluster's workers (diagnose.cluster.rank_analysis), used instead of reading those ranks here."""
    from diagnose.analyzers import description_of, discover

    th = thresholds or Thresholds()
    analysis = Analysis(source=describe_source(profile), warnings=list(profile.warnings), analyzers={})
    derived = Derived(profile, th, rank_parts)  # the tables two analyzers read, each worked out once for this report
    for mod in discover():
        if only and mod.NAME not in only:
            continue
        result = mod.analyze(profile, derived, th)
        analysis.analyzers[mod.NAME] = description_of(mod)
        analysis.results[mod.NAME] = result
        analysis.findings.extend(result.findings)
        analysis.summary.update(result.summary)
    described = analysis.analyzers.values()
    from diagnose.verdict import recoverable_ms, run_figures

    run = run_figures(analysis.results.get("run_budget"))  # with a run budget, rank by the run's seconds
    analysis.findings = rank_findings(
        analysis.findings,
        cause_ids=[i for d in described for i in d.cause_ids],
        symptom_ids=[i for d in described for i in d.symptom_ids],
        recoverable_ms=None if run is None else lambda f: recoverable_ms(f, analysis.analyzers, run),
    )
    declared = declared_metrics()
    for key in analysis.summary:
        metric = describe(key, declared)
        if metric is not None:
            analysis.metrics[key] = metric
    from diagnose.verdict import decide

    analysis.verdict = decide(analysis)
    return analysis


def run_analyzer(analyzer, profile: Profile, thresholds: Thresholds | None = None) -> Result:
    """One analyzer (its module or its ``NAME``) over ``profile``, with its own Derived: a notebook's or a test's
    way to ask one question. ``analyze()`` shares one Derived between all of them."""
    from diagnose.analyzers import discover

    if isinstance(analyzer, str):
        by_name = {mod.NAME: mod for mod in discover()}
        if analyzer not in by_name:
            raise ValueError(f"no analyzer named {analyzer!r}: {', '.join(sorted(by_name))}")
        analyzer = by_name[analyzer]
    th = thresholds or Thresholds()
    return analyzer.analyze(profile, Derived(profile, th), th)


def declared_metrics() -> tuple[Metric, ...]:
    """Every analyzer's declared summary metrics (its ``SUMMARY_METRICS``), in match order, tagged with its name."""
    from dataclasses import replace

    from diagnose.analyzers import discover

    found = []
    for mod in discover():
        found.extend(replace(m, analyzer=m.analyzer or mod.NAME) for m in getattr(mod, "SUMMARY_METRICS", ()))
    return in_match_order(found)


def describe_source(profile: Profile) -> dict[str, Any]:
    from diagnose.ingest.recorded_environment import environment_of
    from diagnose.version import __version__

    m = profile.manifest
    return {
        "paths": list(profile.sources),
        "gpu": profile.gpu_name,
        "environment": environment_of(profile),  # GPU, driver, CUDA, torch/JAX: diff warns when they differ
        "gpudiag_version": __version__,
        "manifest": m or None,
        "artifacts": {
            "ncu_kernel_launches": int(len(profile.kernels)),
            "trace_ranks": sorted(profile.traces),
            "snapshot_ranks": sorted(profile.snapshots),
            "memory_stats_ranks": sorted(profile.memory_stats),
            "step_event_ranks": sorted(profile.step_events),
            "nvml_samples": int(len(profile.nvml)),
        },
    }
