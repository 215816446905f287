"""Write an Analysis to disk: the offline HTML page and the findings JSON, each written whole or not at all."""

from __future__ import annotations

from diagnose._io import atomic_write_text
from diagnose.analysis import Analysis


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
