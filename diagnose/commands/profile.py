"""`gpudiag profile`: run a training script under light instrumentation (default) or Nsight Compute."""

from __future__ import annotations

import click

from diagnose.commands._common import require_output_folder
from parsers.errors import InputError

_NCU_ONLY = (
    "ncu_path",
    "ncu_set",
    "ncu_sections",
    "ncu_replay_mode",
    "ncu_clock_control",
    "ncu_step",
    "ncu_max_launches",
    "ncu_timeout",
    "after_window",
    "launch_skip",
    "launch_count",
    "kernel_name",
    "ncu_nvtx_include",
    "ncu_args",
)


def _snapshot_at(ctx, param, value):
    if value in ("window", "exit") or value.isdigit():
        return value
    raise click.BadParameter("use 'window', 'exit' or a step number")


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Run folder to write (default: gpudiag-runs/<YYYYmmdd-HHMMSS>-<script>/).",
)
@click.option("--ncu", is_flag=True, help="Run under Nsight Compute (kernel metrics) instead of light mode.")
@click.option(
    "--trace-start",
    type=click.IntRange(0),
    default=10,
    show_default=True,
    help="First step of the profiler trace window (light mode).",
)
@click.option(
    "--trace-steps",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Steps in the profiler trace window; 0 = no trace.",
)
@click.option(
    "--snapshot-at",
    default="window",
    show_default=True,
    callback=_snapshot_at,
    help="When to write the allocator history: 'window' (end of the trace window, or where it would have ended "
    "with --trace-steps 0), a step number, or 'exit'.",
)
@click.option(
    "--history-entries",
    type=click.IntRange(0),
    default=100_000,
    show_default=True,
    help="Allocator history ring size; 0 = no allocator history.",
)
@click.option(
    "--memory-stats-interval-ms",
    type=click.FloatRange(0),
    default=500.0,
    show_default=True,
    help="At most one memory_stats record per this many ms (0 = every step).",
)
@click.option(
    "--gpu-time-every",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Time every k-th step on the GPU with CUDA events; 0 = auto: every step unless the events "
    "cost more than 0.5 % of a step, then one step in k.",
)
@click.option("--no-sync-debug", is_flag=True, help="Do not capture synchronizing calls in the trace window.")
@click.option("--no-nvml", is_flag=True, help="Do not sample NVML.")
@click.option("--nvml-hz", type=click.FloatRange(0.1, 100), default=10.0, show_default=True, help="NVML sampling rate.")
@click.option(
    "--ncu-path", default=None, help="[--ncu] The ncu executable (default: PATH, then /usr/local/cuda/bin/ncu)."
)
@click.option(
    "--ncu-set",
    type=click.Choice(["default", "full"]),
    default=None,
    help="[--ncu] 'default': SpeedOfLight, MemoryWorkloadAnalysis, Occupancy, LaunchStats (11 passes per "
    "kernel); 'full': --set full (38 passes, ~3x slower).",
)
@click.option(
    "--ncu-section",
    "ncu_sections",
    multiple=True,
    metavar="NAME",
    help="[--ncu] Section to collect instead of the default four (repeatable).",
)
@click.option(
    "--ncu-replay-mode",
    type=click.Choice(["kernel", "application"]),
    default=None,
    help="[--ncu] Replay each kernel (default) or the whole application.",
)
@click.option(
    "--ncu-clock-control",
    type=click.Choice(["none", "base"]),
    default=None,
    help="[--ncu] 'none' (default): clocks as in training; 'base': ncu locks base clocks.",
)
@click.option(
    "--ncu-step",
    type=click.IntRange(0),
    default=None,
    help="[--ncu] Profile the kernels of this step (NVTX range gpudiag.step_<K>; default 5).",
)
@click.option(
    "--ncu-max-launches",
    type=click.IntRange(0),
    default=None,
    help="[--ncu] At most this many launches inside the step window (default 100; 0 = all).",
)
@click.option(
    "--ncu-timeout",
    type=click.FloatRange(0),
    default=None,
    metavar="SECONDS",
    help="[--ncu] Wall-time budget (default 600; 0 = none): then the script is stopped and ncu keeps what it profiled.",
)
@click.option(
    "--after-window",
    type=click.Choice(["stop", "continue"]),
    default=None,
    help="[--ncu] Once the window is profiled: stop the script (default; the run folder says so) or let it run to "
    "its end under ncu, every kernel slowed 100-1,700x by ncu's interception.",
)
@click.option(
    "--launch-skip",
    type=click.IntRange(0),
    default=None,
    help="[--ncu] Launch window instead of a step: skip this many kernel launches ...",
)
@click.option("--launch-count", type=click.IntRange(1), default=None, help="[--ncu] ... then profile this many.")
@click.option("--kernel-name", default=None, metavar="REGEX", help="[--ncu] Only kernels whose name matches.")
@click.option(
    "--ncu-nvtx-include",
    default=None,
    metavar="EXPR",
    help="[--ncu] A raw --nvtx-include expression instead of the step's range.",
)
@click.option("--ncu-arg", "ncu_args", multiple=True, metavar="ARG", help="[--ncu] Extra argument passed to ncu.")
@click.option("-q", "--quiet", is_flag=True, help="Print only errors.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(
    out,
    ncu,
    trace_start,
    trace_steps,
    snapshot_at,
    history_entries,
    memory_stats_interval_ms,
    gpu_time_every,
    no_sync_debug,
    no_nvml,
    nvml_hz,
    quiet,
    command,
    **ncu_flags,
):
    """Run COMMAND (after --) with gpudiag watching, e.g.

    \b
    gpudiag profile -- python train.py --lr 3e-4
    gpudiag profile -- torchrun --nproc-per-node 2 train.py
    gpudiag profile --ncu --ncu-step 8 -- python -m mypkg.train

    The script runs unchanged; its exit code is gpudiag's exit code.
    """
    from diagnose.launch.capture_mode import ProfileOptions
    from diagnose.launch.launcher import run_profiled
    from diagnose.launch.ncu_command import DEFAULT_MAX_LAUNCHES, DEFAULT_SECTIONS, DEFAULT_TIMEOUT_S, NcuOptions
    from diagnose.launch.run_dir import DEFAULT_PARENT

    if not command:
        raise InputError(None, "no command to profile: gpudiag profile -- python train.py")
    given = [name for name in _NCU_ONLY if ncu_flags.get(name) not in (None, (), False)]
    ncu_options = None
    if ncu:
        f = ncu_flags
        ncu_options = NcuOptions(
            ncu_path=f["ncu_path"],
            full_set=f["ncu_set"] == "full",
            sections=tuple(f["ncu_sections"]) or DEFAULT_SECTIONS,
            replay_mode=f["ncu_replay_mode"] or "kernel",
            clock_control=f["ncu_clock_control"] or "none",
            step=f["ncu_step"],
            max_launches=DEFAULT_MAX_LAUNCHES if f["ncu_max_launches"] is None else f["ncu_max_launches"],
            timeout_s=DEFAULT_TIMEOUT_S if f["ncu_timeout"] is None else f["ncu_timeout"],
            after_window=f["after_window"] or "stop",
            launch_skip=f["launch_skip"],
            launch_count=f["launch_count"],
            kernel_name=f["kernel_name"],
            nvtx_include=f["ncu_nvtx_include"],
            extra_args=tuple(f["ncu_args"]),
        )
    elif given:
        flags = ", ".join(
            "--" + n.replace("_", "-").replace("ncu-sections", "ncu-section").replace("ncu-args", "ncu-arg")
            for n in given
        )
        raise InputError(None, f"{flags} only apply with --ncu")
    require_output_folder(out if out is not None else DEFAULT_PARENT, "-o" if out is not None else "the run folder")
    options = ProfileOptions(
        out=out,
        trace_start=trace_start,
        trace_steps=trace_steps,
        snapshot_at=snapshot_at,
        history_max_entries=history_entries,
        memory_stats_interval_ms=memory_stats_interval_ms,
        gpu_time_every=gpu_time_every,
        sync_debug=not no_sync_debug,
        nvml=not no_nvml,
        nvml_hz=nvml_hz,
        ncu=ncu_options,
        quiet=quiet,
    )
    run = run_profiled(list(command), options)
    raise SystemExit(run.exit_code)
