"""`gpudiag report`: analyse a run folder or artifact into HTML (and JSON)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import click

from diagnose.commands._common import (
    build_thresholds,
    require_input_path,
    require_measurement,
    require_output_path,
    terminal_width,
    threshold_options,
    write_output,
)


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
@click.option(
    "--md",
    "md_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a Markdown summary (verdict, findings table, what was not measured) for CI logs and PR comments.",
)
@click.option("--no-html", is_flag=True, help="Write only the JSON / Markdown / terminal summary.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr while reading (shown for reads over 2 s).")
@threshold_options
def command(path, output, json_path, md_path, no_html, quiet, config_path, thresholds):
    """Diagnose PATH (a run folder, .ncu-rep, ncu CSV, trace or memory snapshot) into one offline HTML page.

    Exit code: 0, or 2 for bad input, including an input in which nothing could be judged.
    """
    from diagnose.analysis import analyze, describe_source
    from diagnose.ingest.loading import load
    from diagnose.outputs.report_files import write_html, write_json, write_markdown
    from reports.terminal import render_terminal

    require_input_path(path)
    html_path = None if no_html else (output or default_report_path(path))
    for out, option in ((html_path, "-o"), (json_path, "--json"), (md_path, "--md")):
        require_output_path(out, option)
    th = build_thresholds(config_path, thresholds)
    profile = load(path, quiet=quiet)
    require_measurement(describe_source(profile)["artifacts"], path, profile.warnings)
    analysis = analyze(profile, th)
    click.echo(render_terminal(analysis, color=sys.stdout.isatty(), width=terminal_width()), nl=False)
    for out, option, write in (
        (html_path, "-o", write_html),
        (json_path, "--json", write_json),
        (md_path, "--md", write_markdown),
    ):
        if out:
            write_output(out, option, partial(write, analysis, out))
            click.echo(f"Wrote {out}")


def default_report_path(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        return str(p / "report.html")
    name = p.name.split(".")[0] or "gpudiag"
    return f"{name}.report.html"
