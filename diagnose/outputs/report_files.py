"""Write an Analysis to disk: the offline HTML page, the findings JSON and the Markdown summary, each written whole
or not at all."""

from __future__ import annotations

from diagnose.analysis import Analysis
from diagnose.outputs.atomic_write import atomic_write_text


def write_html(analysis: Analysis, path) -> str:
    """Render the self-contained HTML report to ``path``; returns the path."""
    from reports.html import render_html

    atomic_write_text(path, render_html(analysis))
    return str(path)


def write_json(analysis: Analysis, path) -> str:
    """Write the findings JSON (schema ``gpudiag.findings/1``) to ``path``; returns the path."""
    from reports.json_report import render_json

    atomic_write_text(path, render_json(analysis))
    return str(path)


def write_markdown(analysis: Analysis, path, gate: str | None = None) -> str:
    """Write the Markdown summary (verdict, findings table, what was not measured) to ``path``; returns the path."""
    from reports.markdown import render_markdown

    atomic_write_text(path, render_markdown(analysis, gate=gate))
    return str(path)
