"""`gpudiag diff A B`: what changed from run A (baseline) to run B; a CI gate with --fail-on-regression."""

from __future__ import annotations

import sys

import click

from diagnose.commands._common import (
    build_thresholds,
    require_input_path,
    require_output_path,
    threshold_options,
    write_output,
)
from diagnose.formatting import n_things, unit_of_column, value_human


@click.command("diff")
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the self-contained HTML comparison here.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the comparison as JSON (schema gpudiag.diff/1, docs/diff.md) here.",
)
@click.option(
    "--fail-on-regression",
    "fail_pct",
    type=click.FloatRange(0),
    default=None,
    metavar="PCT",
    help="Exit 1 when a metric got worse by more than PCT % and the change is significant.",
)
@click.option(
    "--include-unknown-noise",
    is_flag=True,
    help="With --fail-on-regression: also fail on changes whose noise is unknown (single numbers, e.g. peak memory).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.01,
    show_default=True,
    help="Significance level of the Mann-Whitney U test on per-step / per-launch samples.",
)
@click.option("--all", "show_all", is_flag=True, help="List unchanged metrics in the terminal too.")
@threshold_options
def command(run_a, run_b, output, json_path, fail_pct, include_unknown_noise, alpha, show_all, config_path, thresholds):
    """Compare RUN_B against RUN_A (each a run folder or one artifact gpudiag reads).

    \b
    gpudiag diff runs/before runs/after -o diff.html
    gpudiag diff before/ncu/raw.csv after/ncu/raw.csv --json diff.json --fail-on-regression 5

    Which way is better, and how small a change counts as none, is what each analyzer declares for its
    metrics. A WARNING heads the output when A and B ran on different GPUs, drivers, CUDA or torch/JAX versions.

    Exit code: 0, or 1 with --fail-on-regression when a regression exceeds PCT; 2 for bad input.
    """
    from diagnose.comparison.runs import DiffOptions, diff_paths
    from diagnose.outputs.atomic_write import atomic_write_text
    from reports.diff_html import render_diff_json, render_diff_terminal

    for p in (run_a, run_b):
        require_input_path(p)
    for out, option in ((output, "-o"), (json_path, "--json")):
        require_output_path(out, option)
    th = build_thresholds(config_path, thresholds)
    diff = diff_paths(run_a, run_b, thresholds=th, options=DiffOptions(alpha=alpha))
    click.echo(render_diff_terminal(diff, color=sys.stdout.isatty(), show_all=show_all), nl=False)
    if output:
        from reports.diff_html import render_diff_html

        page = render_diff_html(diff)
        write_output(output, "-o", lambda: atomic_write_text(output, page))
        click.echo(f"Wrote {output}")
    if json_path:
        document = render_diff_json(diff)
        write_output(json_path, "--json", lambda: atomic_write_text(json_path, document))
        click.echo(f"Wrote {json_path}")
    if fail_pct is not None:
        hits = diff.regressions(fail_pct, include_unknown_noise=include_unknown_noise)
        if len(hits):
            for rec in hits.itertuples(index=False):
                unit = unit_of_column(str(rec.what).split(": ")[-1])  # "kernel K: median_dur_ns" or a summary key
                click.echo(
                    f"REGRESSION {rec.what}: {value_human(rec.a, unit)} -> {value_human(rec.b, unit)} "
                    f"({rec.change_pct:+.1f} %)"
                )
            if diff.environment_warnings:
                click.echo("(A and B ran in different environments: see the WARNING above)")
            click.echo(f"FAIL: {n_things(len(hits), 'regression')} over {fail_pct:g} %")
            raise SystemExit(1)
        click.echo(f"OK: no regression over {fail_pct:g} %")
