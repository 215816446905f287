"""The self-contained HTML report: the verdict first, then the findings, then one section per analyzer with data.

The page opens on the answer (``analysis.verdict``: one sentence and the step-time budget bar),
then the findings ranked by cost, each with its fix and evidence; analyzers whose input was
missing are one "not measured" line, not cards or empty sections; every summary number is in a
collapsed appendix at the end, labelled by its declared metric (``analysis.metrics``).

plotly.js is inlined once; every figure is a ``full_html=False`` fragment; every
piece of user text goes through Jinja's autoescaping or ``tojson``. Nothing is
loaded from the network.
"""

from __future__ import annotations

import html
import importlib
import json
import math
import numbers
from dataclasses import dataclass

from markupsafe import Markup

from reports.figures import table_html
from reports.format import ns_human, share_human, value_human
from reports.templating import render_page

SECTION_TITLES = {
    "l2": "L2 cache",
    "occupancy": "Occupancy",
    "launch_config": "Launch configuration",
    "tiny_kernels": "Tiny kernels",
    "speed_of_light": "Speed of light",
    "kernels": "Kernels",
    "fragmentation": "Memory and fragmentation",
    "sync": "Host syncs and GPU idle time",
    "idle": "GPU idle time",
    "launch": "Launch statistics",
    "utilization": "NVML utilisation",
    "comm": "Collectives across ranks",
    "steps": "Step timings",
    "step_budget": "Step-time budget",
}

MAX_SUBJECT_ROWS = 50
# the step-budget bar's colours, the same as the idle section's per-step chart (reports/sections/idle.py)
BUDGET_COLORS = {
    "compute": "#4c78a8",
    "non_compute": "#9ecae9",
    "sync": "#e45756",
    "host": "#f58518",
    "short": "#bab0ac",
    "other": "#72b7b2",
    "unlinked": "#d4d4d4",
    "collective": "#54a24b",
    "input": "#b279a2",
    "allocator": "#9d755d",
    "trace_window": "#eeca3b",
    "unexplained": "#e8e8e8",
}
BAR_LABEL_MIN_SHARE = 0.06  # a narrower segment has no room for its % inside the bar (the legend has it)


@dataclass
class Section:
    anchor: str
    title: str
    html: str


def section_anchor(analyzer: str) -> str:
    return f"section-{analyzer}"


def render_section(name: str, result) -> str:
    """The analyzer's own section renderer, or the generic one (findings' tables)."""
    try:
        mod = importlib.import_module(f"reports.sections.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"reports.sections.{name}":
            raise
        return generic_section(result)
    return mod.render(result)


def generic_section(result) -> str:
    parts = []
    for key, df in result.tables.items():
        parts.append(
            f"<h3>{html.escape(str(key))}</h3><div class='scroll'>{table_html(df, f'{result.analyzer}-{key}')}</div>"
        )
    if not parts:
        parts.append('<p class="muted">Nothing to show for this input.</p>')
    return "\n".join(parts)


def _finding_view(f, metrics: dict | None = None, shown: set[str] | None = None) -> dict:
    metrics = metrics or {}
    subjects = [s.to_json() for s in f.subjects[:MAX_SUBJECT_ROWS]]
    kinds = list(dict.fromkeys(s.kind for s in f.subjects))
    columns: list[str] = ["kind"] if len(kinds) > 1 else []  # mixed subjects (a rank, then its worst steps)
    for s in subjects:
        for k in s:
            if k not in columns and k != "kind":
                columns.append(k)
    rows = [[_cell(s.get(c)) for c in columns] for s in subjects]
    section = f.section or section_anchor(f.analyzer)
    return {
        "id": f.id,
        "severity": f.severity.label,
        "title": f.title,
        "cost": share_human(f.cost_share) if f.cost_share is not None else None,
        "section": section if shown is None or section in shown else None,
        "evidence": [
            {
                "metric": metrics[e.metric].label if e.metric in metrics and metrics[e.metric].label else e.metric,
                "key": e.metric if e.metric in metrics and metrics[e.metric].label else "",
                "value": value_human(e.value, e.unit),
                "threshold": "" if e.threshold is None else value_human(e.threshold, e.unit),
            }
            for e in f.evidence
        ],
        "subjects": subjects,
        "subject_columns": columns,
        "subject_rows": rows,
        "subject_kind": (kinds[0] if len(kinds) == 1 else "subject") if kinds else "",
        "recommendation": code_spans(f.recommendation) if f.recommendation else "",
    }


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


def metric_rows(analysis, metrics: dict) -> list[dict]:
    """Every summary key as a row of the appendix: its label and unit where declared, grouped by analyzer."""
    rows, seen = [], set()
    groups = [(name, result.summary) for name, result in analysis.results.items()] + [("", analysis.summary)]
    for name, summary in groups:
        for key in sorted(summary):
            if key in seen or key not in analysis.summary:
                continue
            seen.add(key)
            metric = metrics.get(key)
            unit = metric.unit if metric is not None else unit_of_key(key)
            rows.append(
                {
                    "group": SECTION_TITLES.get(name, name.replace("_", " ").title()) if name else "Other",
                    "label": metric.label if metric is not None and metric.label else key,
                    "labelled": metric is not None and bool(metric.label),
                    "value": metric_value_human(analysis.summary[key], unit),
                    "key": key,
                }
            )
    return rows


KEY_UNITS = (
    ("_pct", "%"),
    ("_share", "share"),
    ("_bytes", "bytes"),
    ("_ns", "ns"),
    ("_us", "µs"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_mhz", "MHz"),
    ("_w", "W"),
    ("_count", "count"),
)


def unit_of_key(key: str) -> str:
    """The unit a summary key's name carries (CONTRIBUTING: units in names), for keys no analyzer declared."""
    return next((unit for suffix, unit in KEY_UNITS if key.lower().endswith(suffix)), "")


def metric_value_human(value, unit: str) -> str:
    """A summary value in its unit, for reading: 28.8 %, 5.53 ms, 422 MiB."""
    if value is None or (isinstance(value, numbers.Real) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if unit == "share":
        return share_human(value)
    if unit == "ms":
        return ns_human(value * 1e6)
    if unit == "µs":
        return ns_human(value * 1e3)
    if unit == "s":
        return ns_human(value * 1e9)
    if unit == "count":
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"
    if unit in ("bytes", "ns", "%"):
        return value_human(value, unit)
    return f"{value:,.4g} {unit}".strip()


def code_spans(text: str) -> Markup:
    """``text`` escaped, with its `backticked` parts as <code>: recommendations name commands and calls that way."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: show the text as it is
        return Markup(html.escape(str(text), quote=False))
    return Markup(
        "".join(
            f"<code>{html.escape(part, quote=False)}</code>" if i % 2 else html.escape(part, quote=False)
            for i, part in enumerate(parts)
        )
    )


def is_not_measured(finding) -> bool:
    """A finding made by ``diagnose.findings.not_measured``: an analyzer's input was missing."""
    return finding.id.endswith(".not_measured")


def not_measured_items(findings) -> list[dict]:
    """What was not measured, grouped by how to measure it: one entry per distinct recommendation."""
    groups: dict[str, list[str]] = {}
    for f in findings:
        if is_not_measured(f):
            what = f.title.removesuffix(" was not measured")
            groups.setdefault(f.recommendation, [])
            if what not in groups[f.recommendation]:
                groups[f.recommendation].append(what)
    return [{"what": ", ".join(whats), "how": code_spans(how)} for how, whats in groups.items()]


def has_data(result) -> bool:
    """A section is worth showing only when its analyzer produced a table with rows."""
    return any(table is not None and len(table) for table in result.tables.values())


def budget_view(budget) -> dict | None:
    """The verdict's step budget as bar segments (width and label per part), or None."""
    if budget is None:
        return None
    parts = [
        {
            "cause": p.cause,
            "label": p.label,
            "pct": f"{100 * p.share:.1f} %",
            "width": f"{100 * p.share:.3f}",
            "color": BUDGET_COLORS.get(p.cause, "#999"),
            "busy": p.busy,
            "wide": p.share >= BAR_LABEL_MIN_SHARE,
        }
        for p in budget.parts
    ]
    what = "step's time" if getattr(budget, "described", None) else "traced time"
    return {"basis": budget.basis(), "parts": parts, "what": what}


def render_html(analysis) -> str:
    """The report: header, the verdict and its step budget, the findings, the sections with data, the appendix."""
    metrics = getattr(analysis, "metrics", None) or {}
    sections = [
        Section(
            section_anchor(name),
            SECTION_TITLES.get(name, name.replace("_", " ").title()),
            render_section(name, result),
        )
        for name, result in analysis.results.items()
        if has_data(result)
    ]
    shown = {s.anchor for s in sections}
    findings = [_finding_view(f, metrics, shown) for f in analysis.findings if not is_not_measured(f)]
    verdict = getattr(analysis, "verdict", None)
    data = {
        "schema": "gpudiag.report-data/1",
        "summary": analysis.summary,
        "findings": [f.to_json() for f in analysis.findings],
        "verdict": verdict.to_json() if verdict is not None else None,
    }
    return render_page(
        "report.html",
        source=analysis.source,
        verdict=verdict,
        verdict_sentence=code_spans(verdict.sentence) if verdict is not None else "",
        budget=budget_view(getattr(verdict, "budget", None)),
        top_ids=set(getattr(verdict, "top_finding_ids", ()) or ()),
        findings=findings,
        not_measured=not_measured_items(analysis.findings),
        sections=sections,
        metric_rows=metric_rows(analysis, metrics),
        warnings=analysis.warnings,
        data=json.loads(json.dumps(data, default=str, allow_nan=False)) if _finite(data) else _scrub(data),
    )


def _finite(obj) -> bool:
    try:
        json.dumps(obj, default=str, allow_nan=False)
        return True
    except ValueError:
        return False


def _scrub(obj):
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        return None
    if isinstance(obj, dict):
        return {k: _scrub(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    return obj
