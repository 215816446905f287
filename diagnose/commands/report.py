"""`gpudiag report`: analyse a run folder or artifact into HTML (and JSON)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diagnose.commands._common import build_thresholds, require_input_path, threshold_options
from parsers.errors import InputError


@click.command("report")
@click.argument("path", type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="HTML file to write (default: report.html beside a run folder, else ./<name>.report.html).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the findings JSON (schema gpudiag.findings/1) here.",
)
@click.option("--no-html", is_flag=True, help="Write only the JSON / terminal summary.")
@threshold_options
def command(path, output, json_path, no_html, config_path, thresholds):
    """Diagnose PATH (a run folder, .ncu-rep, ncu CSV, trace or memory snapshot) into one offline HTML page."""
    from diagnose.analysis import analyze
    from diagnose.load import load
    from diagnose.outputs import write_html, write_json
    from reports.terminal import render_terminal

    require_input_path(path)
    th = build_thresholds(config_path, thresholds)
    profile = load(path)
    if profile.manifest:
        refuse_empty_run(profile, path)
    analysis = analyze(profile, th)
    click.echo(render_terminal(analysis, color=sys.stdout.isatty()), nl=False)
    if not no_html:
        out = output or default_report_path(path)
        write_html(analysis, out)
        click.echo(f"Wrote {out}")
    if json_path:
        write_json(analysis, json_path)
        click.echo(f"Wrote {json_path}")


def refuse_empty_run(profile, path) -> None:
    """A run folder with nothing readable in it is bad input, not an empty report (its notes say why)."""
    tables = [
        profile.kernels,
        profile.nvml,
        *profile.memory_stats.values(),
        *profile.step_events.values(),
        *profile.sync_records.values(),
    ]
    if not (profile.traces or profile.snapshots or any(len(t) for t in tables)):
        raise InputError(
            path,
            "nothing to report: the run folder holds no readable measurement"
            + (f" ({'; '.join(profile.warnings)})" if profile.warnings else ""),
        )


def default_report_path(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        return str(p / "report.html")
    name = p.name.split(".")[0] or "gpudiag"
    return f"{name}.report.html"
