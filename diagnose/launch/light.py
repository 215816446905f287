"""The parent of a profiled run: prepare the folder, start the child, watch, and close the run.

Light mode (the default) runs the user's command as is, with the bootstrap entering each
Python process through a sitecustomize folder put first on PYTHONPATH, and NVML sampled
here. ``--ncu`` runs the same command under Nsight Compute (ncu.py builds the command);
the bootstrap then only marks steps (NVTX ranges and step times), since a torch/JAX
profiler must not run under ncu. Either way the run ends with a manifest and one line
naming the folder and the next command.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.launch import ncu as ncu_mode
from diagnose.launch import run_folder, run_manifest
from diagnose.launch.child_config import ChildConfig
from diagnose.launch.nvml_sampler import DEFAULT_HZ, NvmlSampler
from diagnose.launch.progress import EventsTail, ProgressPrinter
from diagnose.launch.supervisor import Child
from parsers.errors import InputError

SITECUSTOMIZE_DIR = str(Path(__file__).resolve().parent / "sitecustomize")


@dataclass(frozen=True)
class ProfileOptions:
    out: str | None = None
    trace_start: int = 10
    trace_steps: int = 3
    snapshot_at: str = "window"
    history_max_entries: int = 100_000
    memory_stats_interval_ms: float = 100.0
    sync_debug: bool = True
    nvtx: bool = True
    nvml: bool = True
    nvml_hz: float = DEFAULT_HZ
    ncu: ncu_mode.NcuOptions | None = None
    progress_interval_s: float = 10.0
    quiet: bool = False
    extra_env: dict = field(default_factory=dict)

    def child_config(self, run_dir: str) -> ChildConfig:
        if self.ncu is not None:  # under ncu: step marks only, no other profiler
            return ChildConfig(run_dir=run_dir, mode="ncu", trace_steps=0, snapshot_at="exit", history_max_entries=0,
                               memory_stats_interval_ms=self.memory_stats_interval_ms, sync_debug=False, nvtx=True)
        return ChildConfig(run_dir=run_dir, mode="light", trace_start=self.trace_start, trace_steps=self.trace_steps,
                           snapshot_at=self.snapshot_at, history_max_entries=self.history_max_entries,
                           memory_stats_interval_ms=self.memory_stats_interval_ms, sync_debug=self.sync_debug,
                           nvtx=self.nvtx)


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
        import diagnose

        return diagnose.load(self.path)

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


def _say(options: ProfileOptions, text: str) -> None:
    if not options.quiet:
        print(text, file=sys.stderr, flush=True)


def run_profiled(command: list[str] | tuple[str, ...], options: ProfileOptions = ProfileOptions()) -> Run:
    """Run ``command`` under gpudiag and return the Run (exit code = the script's, 128+N for signal N)."""
    command = [str(c) for c in command]
    if not command:
        raise InputError(None, "no command to profile: give it after --, e.g. gpudiag profile -- python train.py")
    ncu_path = ncu_mode.find_ncu(options.ncu.ncu_path) if options.ncu is not None else None
    folder = run_folder.new_run_folder(command, options.out)
    config = options.child_config(str(folder))
    mode = "ncu" if options.ncu is not None else "light"
    option_record = {"child": config.as_dict(), "nvml_hz": options.nvml_hz if options.nvml else None}
    if options.ncu is not None:
        option_record["ncu"] = {"window": options.ncu.describe_window(), "full_set": options.ncu.full_set,
                                "replay_mode": options.ncu.replay_mode, "clock_control": options.ncu.clock_control}
    start_ns = time.time_ns()
    manifest = run_manifest.start_manifest(command, mode, option_record, start_ns)
    parent_expected = []
    child_command = command
    if options.ncu is not None:
        (folder / "ncu").mkdir(exist_ok=True)
        child_command = ncu_mode.build_command(ncu_path, options.ncu, folder, command)
        manifest["ncu_command"] = child_command
        parent_expected += [run_folder.NCU_REPORT, run_folder.NCU_RAW_CSV]
    run_manifest.write_manifest(folder, manifest)

    sampler = None
    if options.nvml and options.ncu is None:
        sampler = NvmlSampler(folder / run_folder.NVML_CSV, options.nvml_hz)
        if sampler.start():
            parent_expected.append(run_folder.NVML_CSV)
        else:
            manifest["unavailable"][run_folder.NVML_CSV] = sampler.unavailable_reason
            _say(options, f"gpudiag: no NVML samples: {sampler.unavailable_reason}; the run goes on without nvml.csv")
            sampler = None
    if options.ncu is not None:
        _say(options, f"gpudiag: profiling under ncu ({ncu_path}): {options.ncu.describe_window()}; "
                      f"ncu output in {folder / run_folder.NCU_LOG}")
    elif config.trace_steps:
        _say(options, f"gpudiag: light mode; profiler trace of steps {config.trace_start}-{config.trace_stop - 1}; "
                      f"writing {folder}")
    tail = EventsTail(folder)
    printer = ProgressPrinter(tail, options.progress_interval_s) if not options.quiet else None
    follower = None
    if options.ncu is not None:
        follower = ncu_mode.LogFollower(folder / run_folder.NCU_LOG, lambda t: _say(options, t),
                                        options.progress_interval_s)
    child = Child(child_command, child_environment(config, extra=options.extra_env))
    if printer:
        printer.start()
    if follower:
        follower.start()
    try:
        exit_code = child.wait()
    finally:
        if printer:
            printer.stop()
        if sampler:
            sampler.stop()
    tail.poll()
    notes = []
    if follower is not None:
        notes += _finish_ncu(options, ncu_path, folder, follower.stop(), tail, time.time_ns() - start_ns)
    manifest = run_manifest.finish_manifest(manifest, folder, exit_code, time.time_ns(), parent_expected, notes)
    run_manifest.write_manifest(folder, manifest)
    _say(options, f"gpudiag: {tail.summary()}; script exit code {exit_code}"
         + (f"; missing: {', '.join(manifest['missing'])}" if manifest["missing"] else ""))
    _say(options, f"Wrote {folder}; next: gpudiag report {folder}")
    return Run(path=folder, exit_code=exit_code, manifest=manifest)


def _finish_ncu(options: ProfileOptions, ncu_path: str, folder: Path, log, tail: EventsTail, elapsed_ns: int) -> list[str]:
    """Export the CSV, say how big and how slow it was, and explain a failed window."""
    notes = []
    report = folder / run_folder.NCU_REPORT
    if log.permission_denied:
        message = ncu_mode.permission_message()
        _say(options, f"gpudiag: error: {message}")
        notes.append(message)
    elif log.no_kernels or (not report.exists() and log.launches == 0):
        steps = tail.step_count(0) if tail.steps else 0
        message = ncu_mode.no_kernel_message(options.ncu, steps)
        _say(options, f"gpudiag: error: {message}")
        notes.append(message)
    if report.exists():
        size = report.stat().st_size
        error = ncu_mode.export_raw_csv(ncu_path, report, folder / run_folder.NCU_RAW_CSV)
        if error:
            notes.append(f"ncu --import to raw.csv failed: {error}")
            _say(options, f"gpudiag: ncu CSV export failed: {error}")
        text = (f"gpudiag: ncu profiled {log.launches} kernel launches in {elapsed_ns / 1e9:.1f} s; "
                f"report {ncu_mode.human_bytes(size)}")
        if options.ncu.window_kind == "step":
            step_ms = tail.host_ms_of(options.ncu.window_step, 0)
            others = [ms for s, ms in tail.steps.get(0, {}).items() if s != options.ncu.window_step]
            if step_ms is not None and others:
                plain = sorted(others)[len(others) // 2]
                if plain > 0:
                    text += (f"; step {options.ncu.window_step} took {step_ms / 1000:.1f} s under ncu vs "
                             f"{plain:.2f} ms per other step ({step_ms / plain:.0f}x slowdown)")
        _say(options, text)
        notes.append(text.removeprefix("gpudiag: "))
    return notes
