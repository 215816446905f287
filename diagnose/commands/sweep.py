"""`gpudiag sweep`: run a script once per grid combination (light mode) and chart memory against throughput."""

from __future__ import annotations

import time
from pathlib import Path

import click

from diagnose.commands._common import require_output_folder, write_output
from parsers.errors import InputError


@click.command("sweep", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--grid",
    "grids",
    multiple=True,
    metavar="NAME=V1,V2,...",
    required=True,
    help="A grid dimension (repeatable); {NAME} in the command is replaced by each value.",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Sweep folder (default: gpudiag-sweeps/<YYYYmmdd-HHMMSS>-<script>/).",
)
@click.option(
    "--samples-per-step",
    "samples_expr",
    default=None,
    metavar="EXPR",
    help="Samples per optimizer step, e.g. 64 or '{batch}*8'; default: the script's "
    "'gpudiag: samples_per_step=N' line.",
)
@click.option(
    "--timeout-s",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Kill a combination that runs longer than this (it is shown as timed out).",
)
@click.option(
    "--profile-arg",
    "profile_args",
    multiple=True,
    metavar="ARG",
    help="Argument for each `gpudiag profile` instead of the defaults "
    "(--trace-steps 0 --history-entries 0 --memory-stats-interval-ms 0); repeatable.",
)
@click.option("--no-profile", is_flag=True, help="Run the commands without gpudiag (a dry check of the grid).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the table's path.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(grids, out, samples_expr, timeout_s, profile_args, no_profile, quiet, command):
    """Run COMMAND (after --) once per combination of the --grid values, e.g.

    \b
    gpudiag sweep --grid accum=1,2,4,8 --grid precision=fp32,bf16,fp16 -- \\
        python train.py --grad-accum {accum} --precision {precision}

    Writes sweep.csv, sweep.json and sweep.html (peak memory against samples/s, Pareto front
    marked) in the sweep folder. A failed combination is shown with its reason; the rest run.
    Exit code: 0 when at least one combination succeeded, 1 when none did, 2 for bad arguments.
    """
    from diagnose.comparison import sweep as sw
    from diagnose.launch.run_dir import safe_name, script_name
    from diagnose.outputs.atomic_write import atomic_write_text
    from reports.sweep_html import render_sweep_html, render_sweep_terminal

    grid = sw.parse_grid(grids)
    template = list(command)
    sw.check_template(template, grid)
    if out is None:
        folder = Path("gpudiag-sweeps") / f"{time.strftime('%Y%m%d-%H%M%S')}-{safe_name(script_name(template))}"
    else:
        folder = Path(out)
        if folder.is_dir() and any(folder.iterdir()):
            raise InputError(folder, "already exists and is not empty; choose a new -o folder")
    require_output_folder(folder, "-o")
    runner = sw.plain_runner if no_profile else sw.profile_runner(tuple(profile_args) or sw.DEFAULT_PROFILE_ARGS)
    say = (lambda _m: None) if quiet else (lambda m: click.echo(m, err=True))
    for w in sw.check_template(template, grid):
        say(f"gpudiag: note: {w}")
    measure = None if no_profile else sw.measure_run
    result = sw.run_sweep(
        template,
        grid,
        folder,
        runner=runner,
        samples_per_step=samples_expr,
        timeout_s=timeout_s,
        progress=say,
        measure=measure,
    )
    html_path = folder / "sweep.html"
    page = render_sweep_html(result)
    write_output(html_path, "sweep.html", lambda: atomic_write_text(html_path, page))
    if not quiet:
        click.echo(render_sweep_terminal(result), nl=False)
    click.echo(f"Wrote {folder / 'sweep.csv'}, {folder / 'sweep.json'}, {html_path}")
    raise SystemExit(0 if len(result.ok) else 1)
