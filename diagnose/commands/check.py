"""`gpudiag check`: a CI gate. Exit 1 when a finding reaches --fail-on, 0 otherwise, 2 for bad input."""
from __future__ import annotations

import json
from pathlib import Path

import click

from diagnose.commands._common import build_thresholds, threshold_options, require_input_path
from diagnose.findings import Severity
from parsers.errors import InputError
from parsers.limits import read_input, require_regular_file


@click.command("check")
@click.argument("path", type=click.Path())
@click.option("--fail-on", type=click.Choice(["info", "warning", "critical"]), default="critical", show_default=True,
              help="Lowest severity that fails the check.")
@click.option("--ignore", multiple=True, metavar="FINDING_ID",
              help="Finding id to leave out of the gate (repeatable), e.g. --ignore tiny_kernels.launch_bound.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the findings JSON here.")
@threshold_options
def command(path, fail_on, ignore, json_path, config_path, thresholds):
    """Exit 1 if PATH has a finding at or above --fail-on. PATH may also be a findings JSON."""
    import diagnose
    from reports.terminal import render_terminal

    require_input_path(path)
    level = Severity.parse(fail_on)
    findings_json = _read_findings_json(path)
    if findings_json is not None:
        hits = [f for f in findings_json["findings"]
                if f["id"] not in ignore and Severity.parse(f["severity"]) >= level]
        for f in hits:
            click.echo(f"{f['severity']:>8}  {f['title']}  [{f['id']}]")
    else:
        th = build_thresholds(config_path, thresholds)
        analysis = diagnose.analyze(diagnose.load(path), th)
        click.echo(render_terminal(analysis), nl=False)
        if json_path:
            diagnose.write_json(analysis, json_path)
        hits = [f for f in analysis.findings if f.id not in ignore and f.severity >= level]
    if hits:
        click.echo(f"FAIL: {len(hits)} finding(s) at or above {fail_on}")
        raise SystemExit(1)
    click.echo(f"OK: no finding at or above {fail_on}")


def _read_findings_json(path: str):
    p = Path(path)
    if p.is_dir():
        return None
    require_regular_file(p)  # a FIFO would block the open below
    with open(p, "rb") as f:
        head = f.read(4096)
    if b'"gpudiag.findings/' not in head:
        return None
    try:
        data = json.loads(read_input(p, json=True).decode("utf-8"))  # nesting capped: json.loads recurses
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(path, f"looks like a findings JSON but does not parse: {e}") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("gpudiag.findings/1") \
            or not isinstance(data.get("findings"), list):
        raise InputError(path, f"expected schema gpudiag.findings/1 with a findings list, found {data.get('schema')!r}")
    for f in data["findings"]:
        if not isinstance(f, dict) or "id" not in f or "severity" not in f:
            raise InputError(path, "a finding lacks id or severity")
        try:
            Severity.parse(str(f["severity"]))
        except ValueError as e:
            raise InputError(path, str(e)) from None
    return data
