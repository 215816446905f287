"""The compact HTML a notebook shows for an Analysis (``Analysis._repr_html_``): the verdict and the findings
table, a few kB with no script and no plotly, instead of the multi-MB report page."""

from __future__ import annotations

from html import escape

from reports.format import input_name, share_human

_SEVERITY_COLORS = {"critical": "#b91c1c", "warning": "#b45309", "info": "#1d4ed8"}
NOT_MEASURED_SUFFIX = ".not_measured"


def render_notebook_html(analysis, limit: int | None = 30) -> str:
    """``analysis``: anything with ``source``, ranked ``findings``, ``warnings`` and optionally ``verdict``.
    ``limit``: measured findings shown in the table (None: all)."""
    src = analysis.source or {}
    parts = ['<div class="gpudiag-summary">']
    paths = input_name(list(src.get("paths", [])))
    gpu = f" on {escape(str(src['gpu']))}" if src.get("gpu") else ""
    parts.append(f"<p><b>gpudiag</b>: <code>{escape(paths)}</code>{gpu}</p>")
    verdict = getattr(analysis, "verdict", None)
    if getattr(verdict, "sentence", None):
        parts.append(f'<p class="gpudiag-verdict"><b>{escape(verdict.sentence)}</b></p>')
    measured = [f for f in analysis.findings if not f.id.endswith(NOT_MEASURED_SUFFIX)]
    unmeasured = [f for f in analysis.findings if f.id.endswith(NOT_MEASURED_SUFFIX)]
    counts = {s: sum(1 for f in measured if f.severity.label == s) for s in ("critical", "warning", "info")}
    parts.append(
        f"<p>{counts['critical']} critical, {counts['warning']} warning, {counts['info']} info, {len(unmeasured)} not measured</p>"
    )
    shown = measured if limit is None else measured[:limit]
    if shown:
        parts.append(
            '<table class="gpudiag-findings"><thead><tr><th>Severity</th><th>Id</th><th>Finding</th>'
            "<th>Cost</th><th>Fix</th></tr></thead><tbody>"
        )
        for f in shown:
            sev = f.severity.label
            cost = share_human(f.cost_share) if f.cost_share is not None else "–"
            parts.append(
                f'<tr><td style="color:{_SEVERITY_COLORS.get(sev, "inherit")}">{escape(sev)}</td>'
                f"<td><code>{escape(f.id)}</code></td><td>{escape(f.title)}</td>"
                f'<td style="text-align:right">{escape(cost)}</td>'
                f"<td>{escape(getattr(f, 'recommendation', '') or '')}</td></tr>"
            )
        parts.append("</tbody></table>")
        if len(shown) < len(measured):
            parts.append(f"<p>… and {len(measured) - len(shown)} more: write the full report with write_html.</p>")
    if unmeasured:
        items = "".join(f"<li>{escape(f.title)} (<code>{escape(f.id)}</code>)</li>" for f in unmeasured)
        parts.append(f"<details><summary>Not measured ({len(unmeasured)})</summary><ul>{items}</ul></details>")
    if analysis.warnings:
        items = "".join(f"<li>{escape(w)}</li>" for w in analysis.warnings)
        parts.append(f"<details><summary>Notes ({len(analysis.warnings)})</summary><ul>{items}</ul></details>")
    parts.append("</div>")
    return "\n".join(parts)
