"""`gpudiag check`: a CI gate. Exit 1 when a finding reaches --fail-on, 0 otherwise, 2 for bad input
(including an input in which nothing could be judged, the rule `report` uses, and an unknown --ignore id).

The rule is the library's (diagnose/checks/gate.py); this command reads its options, analyses or reads the input,
and prints."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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
from parsers.errors import InputError
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
    help="Finding id (or glob, e.g. 'l2.*') to leave out of the gate (repeatable), e.g. "
    "--ignore tiny_kernels.launch_bound. An id no analyzer declares is an error that lists the known ids.",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Also write the findings JSON here."
)
@click.option(
    "--md",
    "md_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a Markdown summary with the gate's result (for CI logs and PR comments).",
)
@threshold_options
def command(path, fail_on, ignore, json_path, md_path, config_path, thresholds):
    """Exit 1 if PATH has a finding at or above --fail-on. PATH may also be a findings JSON.

    Every finding is listed with its id ([l2.low_hit_rate]), the id --ignore takes.
    Exit code: 0 (pass), 1 (a finding at or above --fail-on), 2 (bad input, nothing to judge, unknown --ignore).
    """
    from diagnose.checks.gate import ignore_matcher, judge, known_finding_ids
    from diagnose.findings import Severity
    from diagnose.outputs.report_files import write_json, write_markdown
    from parsers import registry
    from reports.terminal import render_terminal

    require_input_path(path)
    for out, option in ((json_path, "--json"), (md_path, "--md")):
        require_output_path(out, option)
    level = Severity.parse(fail_on)
    reader = None if Path(path).is_dir() else registry.detect(path)  # a folder is read as `report` reads it
    if reader is not None and reader.table == FINDINGS:
        if json_path:
            raise InputError(path, "is already a findings JSON: --json writes the findings of an analysis")
        document = findings_document(reader.read(path), path)
        ignored = ignore_matcher(ignore, known_finding_ids() + tuple(f.id for f in document.findings))
        require_measurement(document.source.get("artifacts"), path, verb="check")
        analysis = document
    else:
        from diagnose.analysis import analyze, describe_source
        from diagnose.ingest.loading import load

        ignored = ignore_matcher(ignore, known_finding_ids())
        th = build_thresholds(config_path, thresholds)
        profile = load(path)
        require_measurement(describe_source(profile)["artifacts"], path, profile.warnings, verb="check")
        analysis = analyze(profile, th)
        if json_path:
            write_output(json_path, "--json", lambda: write_json(analysis, json_path))
    result = judge(analysis.findings, level, ignored)
    click.echo(render_terminal(analysis, color=sys.stdout.isatty(), limit=None, width=terminal_width()), nl=False)
    if result.ignored_ids:
        click.echo(f"ignored (--ignore): {', '.join(result.ignored_ids)}")
    if json_path:
        click.echo(f"Wrote {json_path}")
    if md_path:
        write_output(md_path, "--md", lambda: write_markdown(analysis, md_path, gate=result.line))
        click.echo(f"Wrote {md_path}")
    click.echo(result.line)
    if not result.passed:
        raise SystemExit(result.exit_code)


@dataclass
class FindingsDocument:
    """A findings JSON read back, shaped like an Analysis for the renderers (duck-typed)."""

    findings: list[Any]
    source: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    verdict: Any = None


def findings_document(data: dict, path) -> FindingsDocument:
    """The parts of a ``gpudiag.findings/1`` document at ``path`` that the gate and its summaries show."""
    from diagnose.findings import Severity

    findings = [
        SimpleNamespace(
            id=str(f["id"]),
            severity=Severity.parse(str(f["severity"])),
            title=str(f.get("title") or f["id"]),
            cost_share=f.get("cost_share") if type(f.get("cost_share")) in (int, float) else None,
            recommendation=str(f.get("recommendation") or ""),
        )
        for f in data["findings"]
    ]
    given = data.get("source") if isinstance(data.get("source"), dict) else {}
    artifacts = given.get("artifacts")
    source = {
        "paths": [str(path)],  # what was checked; the run it came from is in the JSON's source.paths
        "gpu": str(given["gpu"]) if given.get("gpu") else None,
        "artifacts": artifacts if isinstance(artifacts, dict) else None,
    }
    warnings = data.get("warnings")
    verdict = data.get("verdict")
    return FindingsDocument(
        findings=findings,
        source=source,
        warnings=[str(w) for w in warnings if w] if isinstance(warnings, list) else [],
        verdict=SimpleNamespace(sentence=str(verdict["sentence"]))
        if isinstance(verdict, dict) and verdict.get("sentence")
        else None,
    )
