"""The self-contained HTML report: the verdict first, then the findings, then one section per analyzer with data.

The page opens on the answer (``analysis.verdict``: one sentence, the run budget's bar and the step-time budget's),
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
import numbers
from dataclasses import dataclass

from markupsafe import Markup

from reports.chart_budget import short_kernel_name
from reports.figures import cause_color, ink_on, run_part_color, table_html
from reports.format import cell_text, label_of_key, ms_human, share_human, short_location, value_human
from reports.templating import render_page

MAX_SUBJECT_ROWS = 50
BAR_LABEL_MIN_SHARE = 0.06  # a narrower segment has no room for its % inside the bar (the legend has it)


@dataclass
class Section:
    anchor: str
    title: str
    html: str


def section_anchor(analyzer: str) -> str:
    return f"section-{analyzer}"


def section_title(analysis, name: str) -> str:
    """The heading of analyzer ``name``'s section: its declared ``TITLE`` (``analysis.analyzers``), else its name."""
    described = (getattr(analysis, "analyzers", None) or {}).get(name)
    return described.title if described is not None else name.replace("_", " ").title()


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
            if k not in columns and k not in ("kind", "kernel_name"):
                columns.append(k)
    shorts = [short_kernel_name(s["name"]) for s in subjects]  # the hover tells same-named kernels apart
    rows = [[_subject_cell(s, c, short) for c in columns] for s, short in zip(subjects, shorts or [""] * len(subjects))]
    section = f.section or section_anchor(f.analyzer)
    return {
        "id": f.id,
        "severity": f.severity.label,
        "title": f.title,
        "cost": share_human(f.cost_share) if f.cost_share is not None else None,
        "section": section if shown is None or section in shown else None,
        "evidence": [_evidence_view(e, metrics) for e in f.evidence],
        "subjects": subjects,
        "subject_columns": [{"label": label_of_key(c), "key": c} for c in columns],
        "subject_rows": rows,
        "subject_kind": (kinds[0] if len(kinds) == 1 else "subject") if kinds else "",
        "recommendation": code_spans(f.recommendation) if f.recommendation else "",
    }


def _evidence_view(e, metrics: dict) -> dict:
    """An evidence row: the metric's declared label (else its ncu or derived label), its key in grey, the value
    and the threshold in the evidence's unit."""
    declared = metrics.get(e.metric)
    label = declared.label if declared is not None and declared.label else evidence_label(e.metric)
    return {
        "metric": label,
        "key": e.metric if label != e.metric else "",
        "value": value_human(e.value, e.unit),
        "threshold": "" if e.threshold is None else value_human(e.threshold, e.unit),
    }


# ncu's metric names, as the evidence of the ncu analyzers cites them
NCU_LABELS = {
    "launch__grid_size": "Grid size",
    "launch__block_size": "Block size",
    "launch__waves_per_multiprocessor": "Waves per SM",
    "device__attribute_multiprocessor_count": "SMs on the GPU",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "Achieved occupancy",
    "sm__maximum_warps_per_active_cycle_pct": "Theoretical occupancy",
    "lts__t_sector_hit_rate.pct": "L2 hit rate",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput, of peak",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "Memory throughput, of peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput, of peak",
    "gpu__time_duration.sum (mean of tiny launches)": "Mean duration of the tiny launches",
    "derived__memory_l2_theoretical_sectors_global_excessive": "Excess L2 sectors (global accesses)",
    "l2_hit_time_weighted_pct (flagged kernels)": "L2 hit rate of the flagged kernels, time-weighted",
    "reuse (global-load sectors requested per DRAM sector read)": "Reuse: global-load sectors requested per DRAM sector",
}


def evidence_label(metric: str) -> str:
    """What an evidence's metric reads as: ncu's metric names by what they measure, other keys as words."""
    if metric in NCU_LABELS:
        return NCU_LABELS[metric]
    if metric.startswith("limiter: "):
        return f"Load of the limiting unit ({metric.removeprefix('limiter: ')})"
    if "__" in metric or " " in metric:
        return metric
    return label_of_key(metric)


def _subject_cell(subject: dict, column: str, short_name: str) -> dict:
    """A subject table cell: text for its column's unit; a kernel's short name with its full name on hover."""
    value = subject.get(column)
    if column == "name" and subject.get("kind") == "kernel":
        full = subject.get("kernel_name") or value
        return {
            "text": short_name,
            "title": full if full == value else f"{value}\n{full}",
            "num": False,
            "kernel": True,
        }
    if value is None:
        return {"text": "", "title": "", "num": False}
    numeric = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return {"text": cell_text(value, column), "title": "", "num": numeric}


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
                    "group": section_title(analysis, name) if name else "Other",
                    "label": metric.label if metric is not None and metric.label else label_of_key(key),
                    "labelled": True,
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
    """A summary value in its unit, for reading: 28.8 %, 5.53 ms, 422 MiB, 4,980 /s."""
    if isinstance(value, bool) or (value is not None and not isinstance(value, numbers.Real)):
        return str(value)
    return value_human(value, unit)


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
            what = f.title.removesuffix(" was not measured").removesuffix(" were not measured")
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
            "color": cause_color(p.cause),
            "busy": p.busy,
            "wide": p.share >= BAR_LABEL_MIN_SHARE,
        }
        for p in budget.parts
    ]
    what = "step's time" if getattr(budget, "described", None) else "traced time"
    return {"basis": budget.basis(), "parts": parts, "what": what}


def run_budget_view(run) -> dict | None:
    """The verdict's run budget (``verdict.run``: the lowest rank's wall time, process start to exit) as bar segments,
    each with its time, share and code location (the user's line, and the library's frame beside it), or None."""
    if run is None:
        return None
    parts = []
    for p in run.parts:
        pct = f"{100 * p.share:.1f} %"
        where = short_location(p.location)
        library = short_location(p.library_location)
        at = (f" at {where}" if where else "") + (f" (in {library})" if library else "")
        color = run_part_color(p.part)
        parts.append(
            {
                "part": p.part,
                "label": p.label,
                "ms": ms_human(p.ms),
                "pct": pct,
                "width": f"{100 * max(p.share, 0.0):.3f}",
                "color": color,
                "ink": ink_on(color),
                "wide": p.share >= BAR_LABEL_MIN_SHARE,
                "location": where,
                "library_location": library,
                "title": f"{p.label}: {ms_human(p.ms)}, {pct} of the run{at}",
            }
        )
    return {"basis": run.basis(), "parts": parts}


def render_html(analysis) -> str:
    """The report: header, the verdict and its step budget, the findings, the sections with data, the appendix."""
    metrics = getattr(analysis, "metrics", None) or {}
    sections = [
        Section(
            section_anchor(name),
            section_title(analysis, name),
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
        run_budget=run_budget_view(getattr(verdict, "run", None)),
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
