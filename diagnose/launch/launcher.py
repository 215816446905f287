"""One profiled run from start to end, in either capture mode: prepare the folder, start the child, watch it,
and close the run with a manifest and one line naming the folder and the next command.

The launcher does what both modes do; a mode (:class:`diagnose.launch.capture_mode.CaptureMode`) adds its own
at each step: :mod:`diagnose.launch.light_mode` (the default: the command as it is, the bootstrap entering each
Python process through a sitecustomize folder put first on PYTHONPATH, NVML sampled here) and
:mod:`diagnose.launch.ncu_mode` (``--ncu``: the same command under Nsight Compute).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.launch import fault_reports, run_dir, run_manifest
from diagnose.launch.capture_mode import CaptureMode, ProfileOptions
from diagnose.launch.child_config import ENV_DISABLE, ChildConfig
from diagnose.launch.light_mode import LightMode
from diagnose.launch.ncu_mode import NcuMode
from diagnose.launch.run_progress import EventsTail, ProgressPrinter
from diagnose.launch.supervisor import Child, signal_name
from parsers import run_folder
from parsers.errors import InputError

SITECUSTOMIZE_DIR = str(Path(__file__).resolve().parent / "sitecustomize")


@dataclass
class Run:
    """A finished (or, in a notebook, running) profile: where it is and how the script ended."""

    path: Path
    exit_code: int | None = None
    manifest: dict = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return list(self.manifest.get("missing", []))

    def load(self):
        """The run as a Profile (diagnose.load)."""
        from diagnose.ingest.loading import load

        return load(self.path)

    def __fspath__(self) -> str:
        return os.fspath(self.path)


def child_environment(config: ChildConfig, base: dict | None = None, extra: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(config.to_env())
    env.pop("GPUDIAG_DISABLE", None)
    existing = env.get("PYTHONPATH", "")
    parts = [SITECUSTOMIZE_DIR] + [p for p in existing.split(os.pathsep) if p and p != SITECUSTOMIZE_DIR]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.update(extra or {})
    return env


def run_profiled(command: list[str] | tuple[str, ...], options: ProfileOptions = ProfileOptions()) -> Run:
    """Run ``command`` under gpudiag and return the Run (exit code = the script's, 128+N for signal N)."""
    command = [str(c) for c in command]
    if not command:
        raise InputError(None, "no command to profile: give it after --, e.g. gpudiag profile -- python train.py")
    mode = NcuMode(options) if options.ncu is not None else LightMode(options)
    folder = run_dir.new_run_folder(command, options.out)
    config = options.child_config(str(folder))
    option_record = {
        "child": config.as_dict(),
        "nvml_hz": options.nvml_hz if options.nvml else None,
        **mode.option_record(),
    }
    start_ns = time.time_ns()
    manifest = run_manifest.start_manifest(command, mode.name, option_record, start_ns)
    child_command = mode.prepare(folder, command, manifest)
    try:
        run_manifest.write_manifest(folder, manifest)
    except OSError as e:
        raise InputError(
            folder / run_folder.MANIFEST,
            f"cannot be written ({fault_reports.describe_error(e)}); free some space or choose another --out",
        ) from None
    mode.announce(folder, manifest, config)
    tail = EventsTail(folder)
    env = child_environment(config, extra={**mode.child_env(), **options.extra_env})
    exit_code, killed_by, faults, (child_start_ns, child_end_ns) = _run_child(
        mode, options, folder, child_command, env, tail
    )
    manifest["child_start_ns"], manifest["child_end_ns"] = child_start_ns, child_end_ns  # the main run's, not a rerun's
    notes: list[str] = []
    mode.finish(folder, tail, killed_by, start_ns, faults, notes)
    if mode.rerun is not None:  # --ncu saw no step: the same command again under a launch window, by itself
        child_command = mode.prepare_rerun(folder, command, manifest)
        env = child_environment(config, extra={**mode.child_env(), **options.extra_env, ENV_DISABLE: "1"})
        exit_code, killed_by, more_faults, _ = _run_child(mode, options, folder, child_command, env, tail)
        faults += more_faults
        mode.finish(folder, tail, killed_by, start_ns, faults, notes)
    if getattr(mode, "stopped_after_window", False) and exit_code in (0, 128 + 15, 256 - 15):
        # --after-window stop ended the script (SIGTERM) once its ncu window was profiled: the end asked for. ncu
        # passes the script's status on: 143 as a shell gives it, or 241 where the -15 of a killed child is exited
        # with as is (the test's stand-in does, Python's sys.exit(-15); seen when the stop came as the script ended)
        manifest["stopped_after_window"] = True
        exit_code = 0
    return _close_run(options, folder, manifest, exit_code, mode.expected, notes, faults, tail)


def _run_child(
    mode: CaptureMode, options: ProfileOptions, folder: Path, child_command: list[str], env: dict, tail: EventsTail
):
    """One run of the child to its end: (exit code, the signal that killed it or None, the faults it reported,
    (unix ns just before the child was spawned, unix ns just after it was waited for)): the run budget's wall time."""
    printer = ProgressPrinter(tail, options.progress_interval_s) if not options.quiet else None
    listener = fault_reports.Listener()
    try:
        child_start_ns = time.time_ns()
        child = Child(child_command, {**env, **listener.env()}, on_signal=mode.on_signal)
    except BaseException:
        listener.close()
        raise
    if printer:
        printer.start()
    mode.follow(folder)
    mode.watch(child)
    try:
        exit_code = child.wait()
        child_end_ns = time.time_ns()
    finally:
        if printer:
            printer.stop()
        mode.stop_sampling()
    killed_by = signal_name(-child.process.returncode) if child.process.returncode < 0 else None
    mode.after_exit(child, killed_by)
    tail.poll()
    faults = listener.receive()
    listener.close()
    return exit_code, killed_by, faults, (child_start_ns, child_end_ns)


def _close_run(
    options: ProfileOptions,
    folder: Path,
    manifest: dict,
    exit_code: int,
    expected: list[str],
    notes: list[str],
    faults: list[dict],
    tail: EventsTail,
) -> Run:
    """The end of either mode: leftovers removed, the final manifest written, one line on what was written."""
    leftovers = run_dir.remove_leftovers(folder)
    if leftovers:
        notes.append(f"removed {len(leftovers)} temporary file(s) that a stopped writer left: {', '.join(leftovers)}")
        faults += [{"kind": "leftover", "path": path} for path in leftovers]
    manifest = run_manifest.finish_manifest(manifest, folder, exit_code, time.time_ns(), expected, notes, faults)
    try:
        run_manifest.write_manifest(folder, manifest)
    except OSError as e:
        options.say(
            f"gpudiag: error: the final manifest.json could not be written "
            f"({fault_reports.describe_error(e)}); {folder} keeps the one written at the start "
            f"(status 'running'): the script ended with exit code {exit_code}",
        )
    options.say(
        f"gpudiag: {tail.summary()}; script exit code {exit_code}"
        + (f"; missing: {', '.join(manifest['missing'])}" if manifest["missing"] else "")
        + (f"; incomplete: {', '.join(manifest['incomplete'])}" if manifest["incomplete"] else ""),
    )
    options.say(f"Wrote {folder}; next: gpudiag report {folder}")
    return Run(path=folder, exit_code=exit_code, manifest=manifest)
