"""The self-contained HTML report: findings first, then one section per analyzer.

plotly.js is inlined once; every figure is a ``full_html=False`` fragment; every
piece of user text goes through Jinja's autoescaping or ``tojson``. Nothing is
loaded from the network.
"""

from __future__ import annotations

import html
import importlib
import json
from dataclasses import dataclass

from reports.figures import table_html
from reports.format import share_human, value_human
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
}

MAX_SUBJECT_ROWS = 50


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


def _finding_view(f) -> dict:
    subjects = [s.to_json() for s in f.subjects[:MAX_SUBJECT_ROWS]]
    columns: list[str] = []
    for s in subjects:
        for k in s:
            if k not in columns and k != "kind":
                columns.append(k)
    rows = [[_cell(s.get(c)) for c in columns] for s in subjects]
    return {
        "id": f.id,
        "severity": f.severity.label,
        "title": f.title,
        "cost": share_human(f.cost_share) if f.cost_share is not None else None,
        "section": f.section or section_anchor(f.analyzer),
        "evidence": [
            {
                "metric": e.metric,
                "value": value_human(e.value, e.unit),
                "threshold": "" if e.threshold is None else value_human(e.threshold, e.unit),
            }
            for e in f.evidence
        ],
        "subjects": subjects,
        "subject_columns": columns,
        "subject_rows": rows,
        "subject_kind": f.subjects[0].kind if f.subjects else "",
        "recommendation": f.recommendation,
    }


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


def _summary_items(summary: dict) -> list[dict]:
    items = []
    for name in sorted(summary):
        value = summary[name]
        if name.endswith("_pct"):
            text = value_human(value, "%")
        elif name.endswith("_bytes"):
            text = value_human(value, "bytes")
        elif name.endswith("_ns"):
            text = value_human(value, "ns")
        elif isinstance(value, float):
            text = f"{value:,.4g}"
        else:
            text = str(value)
        items.append({"name": name, "value": text})
    return items


def render_html(analysis) -> str:
    sections = []
    for name, result in analysis.results.items():
        sections.append(
            Section(
                section_anchor(name),
                SECTION_TITLES.get(name, name.replace("_", " ").title()),
                render_section(name, result),
            )
        )
    data = {
        "schema": "gpudiag.report-data/1",
        "summary": analysis.summary,
        "findings": [f.to_json() for f in analysis.findings],
    }
    return render_page(
        "report.html",
        source=analysis.source,
        findings=[_finding_view(f) for f in analysis.findings],
        sections=sections,
        summary_items=_summary_items(analysis.summary),
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
