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
@click.option(
    "--cluster",
    default=None,
    metavar="local:N|tcp://HOST:PORT",
    help="Read the folder's rank traces on a Dask cluster, one task per rank, kept as Parquet for the next report "
    "(needs `pip install 'gpudiag[cluster]'`; docs/scaling.md).",
)
@click.option(
    "--cache",
    "cache_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="With --cluster: keep each rank's Parquet tables under this folder (default: .gpudiag-cache next to the traces).",
)
@click.option(
    "--worker-memory",
    default=None,
    metavar="SIZE",
    help="With --cluster local:N: each worker's memory cap, e.g. 1GiB (default: Dask's, memory / workers).",
)
@threshold_options
def command(
    path, output, json_path, md_path, no_html, quiet, cluster, cache_dir, worker_memory, config_path, thresholds
):
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
    options = cluster_options(cluster, cache_dir, worker_memory)
    if options is None:
        profile = load(path, quiet=quiet)
        require_measurement(describe_source(profile)["artifacts"], path, profile.warnings)
        analysis = analyze(profile, th)
    else:  # the ranks read and analysed on the cluster's workers, put together here (docs/scaling.md)
        from diagnose.cluster.cluster_report import load_with_parts

        profile, parts = load_with_parts(path, options, th, quiet)
        require_measurement(describe_source(profile)["artifacts"], path, profile.warnings)
        analysis = analyze(profile, th, rank_parts=parts)
    click.echo(render_terminal(analysis, color=sys.stdout.isatty(), width=terminal_width()), nl=False)
    for out, option, write in (
        (html_path, "-o", write_html),
        (json_path, "--json", write_json),
        (md_path, "--md", write_markdown),
    ):
        if out:
            write_output(out, option, partial(write, analysis, out))
            click.echo(f"Wrote {out}")


def cluster_options(cluster: str | None, cache_dir: str | None, worker_memory: str | None):
    """--cluster and its options as diagnose.load takes them; a clear exit 2 when they cannot be used."""
    from diagnose.ingest.loading import ClusterOptions
    from parsers.errors import InputError

    if cluster is None:
        for value, option in ((cache_dir, "--cache"), (worker_memory, "--worker-memory")):
            if value is not None:
                raise click.UsageError(f"{option} is an option of --cluster: add --cluster local:N (or an address)")
        return None
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as e:
        raise InputError(None, f"--cluster needs the cluster extra: pip install 'gpudiag[cluster]' ({e})") from None
    from diagnose.cluster.cluster_read import parse_cluster

    parse_cluster(cluster)  # a malformed value is said before any file is read
    if worker_memory is not None:
        from dask.utils import parse_bytes

        try:
            parse_bytes(worker_memory)
        except (ValueError, TypeError):
            raise InputError(None, f"--worker-memory {worker_memory}: expected a size such as 1GiB or 800MB") from None
    return ClusterOptions(cluster, cache_dir, worker_memory)


def default_report_path(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        return str(p / "report.html")
    name = p.name.split(".")[0] or "gpudiag"
    return f"{name}.report.html"
