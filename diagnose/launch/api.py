"""``diagnose.profile``: the Python API of `gpudiag profile`.

    run = diagnose.profile(["python", "train.py", "--lr", "3e-4"])     # a subprocess, like the CLI
    run.exit_code, run.path

    with diagnose.profile(out="runs/nb") as run:                         # a notebook: this process
        for batch in loader: ...                                         # steps: diagnose.step() / optimizer / backward()
    diagnose.load(run.path)

Both write the same run folder. The context manager instruments the block in this
process (mode "in-process"); it cannot use --ncu, which must start the process.
"""

from __future__ import annotations

import shlex
import sys
import time

from diagnose.launch import run_dir, run_manifest
from diagnose.launch.capture_mode import ProfileOptions
from diagnose.launch.launcher import Run, run_profiled
from diagnose.launch.ncu_command import NcuOptions
from diagnose.launch.nvml_sampler import NvmlSampler
from parsers import run_folder
from parsers.errors import InputError


def profile(command=None, *, out=None, ncu: bool | NcuOptions = False, quiet: bool = False, **options):
    """Profile ``command`` (a list or a shell-like string) and return its :class:`Run`; without a command,
    a context manager that profiles the ``with`` block in this process. ``options`` are ProfileOptions fields
    (trace_start, trace_steps, snapshot_at, history_max_entries, memory_stats_interval_ms, gpu_time_every,
    sync_debug, nvtx, nvml, nvml_hz)."""
    ncu_options = ncu if isinstance(ncu, NcuOptions) else (NcuOptions() if ncu else None)
    try:
        settings = ProfileOptions(out=None if out is None else str(out), ncu=ncu_options, quiet=quiet, **options)
    except TypeError as e:
        raise InputError(None, f"diagnose.profile: {e}") from None
    if command is None:
        if ncu_options is not None:
            raise InputError(None, "ncu must start the process: use diagnose.profile([...command...], ncu=True)")
        return InProcessProfile(settings)
    if isinstance(command, str):
        command = shlex.split(command)
    return run_profiled(list(command), settings)


class InProcessProfile:
    """``with diagnose.profile() as run:`` instruments this process for the block."""

    def __init__(self, settings: ProfileOptions):
        self.settings = settings
        self.run: Run | None = None
        self._sampler = None
        self._manifest = None
        self._expected: list[str] = []

    def __enter__(self) -> Run:
        from diagnose.launch.child_config import ChildConfig
        from diagnose.launch.runtime import lifecycle

        if lifecycle.active() is not None:
            raise InputError(
                None, "this process is already being profiled (nested diagnose.profile or under `gpudiag profile`)"
            )
        name = [sys.argv[0] or "notebook"] if sys.argv and sys.argv[0] not in ("", "-c") else ["notebook"]
        folder = run_dir.new_run_folder(name, self.settings.out)
        light = self.settings.child_config(str(folder))
        config = ChildConfig(**{**light.as_dict(), "mode": "in-process"})
        self._start_ns = time.time_ns()
        self._manifest = run_manifest.start_manifest(
            ["<in-process>"] + list(sys.argv), "in-process", {"child": config.as_dict()}, self._start_ns
        )
        run_manifest.write_manifest(folder, self._manifest)
        if self.settings.nvml:
            self._sampler = NvmlSampler(folder / run_folder.NVML_CSV, self.settings.nvml_hz)
            if self._sampler.start():
                self._expected.append(run_folder.NVML_CSV)
            else:
                self._manifest["unavailable"][run_folder.NVML_CSV] = self._sampler.unavailable_reason
                if not self.settings.quiet:
                    print(f"gpudiag: no NVML samples: {self._sampler.unavailable_reason}", file=sys.stderr)
                self._sampler = None
        lifecycle.install(config)
        self.run = Run(path=folder)
        return self.run

    def __exit__(self, exc_type, exc, tb) -> bool:
        from diagnose.launch.runtime import lifecycle

        faults = []
        try:
            faults += lifecycle.uninstall()
        finally:
            if self._sampler is not None:
                self._sampler.stop()
                if self._sampler.stopped:
                    faults.append({**self._sampler.stopped, "artifact": run_folder.NVML_CSV})
        exit_code = 0 if exc_type is None else (130 if exc_type is KeyboardInterrupt else 1)
        manifest = run_manifest.finish_manifest(
            self._manifest, self.run.path, exit_code, time.time_ns(), self._expected, faults=faults
        )
        run_manifest.write_manifest(self.run.path, manifest)
        self.run.exit_code = exit_code
        self.run.manifest = manifest
        if not self.settings.quiet:
            print(f"Wrote {self.run.path}; next: gpudiag report {self.run.path}", file=sys.stderr)
        return False
