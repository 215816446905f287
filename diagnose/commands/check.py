"""`gpudiag check`: a CI gate. Exit 1 when a finding reaches --fail-on, 0 otherwise, 2 for bad input."""

from __future__ import annotations

import click

from diagnose.commands._common import build_thresholds, require_input_path, threshold_options
from diagnose.findings import Severity
from parsers import registry
from parsers.reader import FINDINGS


@click.command("check")
@click.argument("path", type=click.Path())
@click.option(
    "--fail-on",
    type=click.Choice(["info", "warning", "critical"]),
    default="critical",
    show_default=True,
    help="Lowest severity that fails the check.",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="FINDING_ID",
    help="Finding id to leave out of the gate (repeatable), e.g. --ignore tiny_kernels.launch_bound.",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write the findings JSON here."
)
@threshold_options
def command(path, fail_on, ignore, json_path, config_path, thresholds):
    """Exit 1 if PATH has a finding at or above --fail-on. PATH may also be a findings JSON."""
    from diagnose.analysis import analyze
    from diagnose.load import load
    from diagnose.outputs import write_json
    from reports.terminal import render_terminal

    require_input_path(path)
    level = Severity.parse(fail_on)
    reader = registry.detect(path)
    if reader is not None and reader.table == FINDINGS:
        findings_json = reader.read(path)
        hits = [
            f for f in findings_json["findings"] if f["id"] not in ignore and Severity.parse(f["severity"]) >= level
        ]
        for f in hits:
            click.echo(f"{f['severity']:>8}  {f['title']}  [{f['id']}]")
    else:
        th = build_thresholds(config_path, thresholds)
        analysis = analyze(load(path), th)
        click.echo(render_terminal(analysis), nl=False)
        if json_path:
            write_json(analysis, json_path)
        hits = [f for f in analysis.findings if f.id not in ignore and f.severity >= level]
    if hits:
        click.echo(f"FAIL: {len(hits)} finding(s) at or above {fail_on}")
        raise SystemExit(1)
    click.echo(f"OK: no finding at or above {fail_on}")
