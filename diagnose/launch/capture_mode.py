"""What the two capture modes share: the options of a profiled run, and the steps the launcher takes a mode
through.

:mod:`diagnose.launch.launcher` runs one profiled run from start to end and calls a mode at each step
(:class:`CaptureMode`); :mod:`diagnose.launch.light_mode` (the default: the command as it is, NVML sampled
here) and :mod:`diagnose.launch.ncu_mode` (``--ncu``: the command under Nsight Compute) fill in their own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.launch.child_config import ChildConfig
from diagnose.launch.ncu_command import NcuOptions
from diagnose.launch.nvml_sampler import DEFAULT_HZ
from diagnose.launch.run_progress import EventsTail
from diagnose.launch.supervisor import Child


@dataclass(frozen=True)
class ProfileOptions:
    out: str | None = None
    trace_start: int = 10
    trace_steps: int = 3
    snapshot_at: str = "window"
    history_max_entries: int = 100_000
    memory_stats_interval_ms: float = 500.0
    gpu_time_every: int = 0
    sync_debug: bool = True
    nvtx: bool | str = True  # True: ranges when an NVTX tool is in the environment; "always"; False
    nvml: bool = True
    nvml_hz: float = DEFAULT_HZ
    ncu: NcuOptions | None = None
    progress_interval_s: float = 10.0
    quiet: bool = False
    extra_env: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.nvtx not in (True, False, "always"):
            raise TypeError(f"nvtx must be True, False or 'always', not {self.nvtx!r}")

    def child_config(self, run_dir: str) -> ChildConfig:
        if self.ncu is not None:  # under ncu: step marks and the allocator history, no profiler
            return ChildConfig(
                run_dir=run_dir,
                mode="ncu",
                trace_steps=0,
                snapshot_at="exit",
                history_max_entries=self.history_max_entries,
                memory_stats_interval_ms=self.memory_stats_interval_ms,
                gpu_time_every=self.gpu_time_every,
                sync_debug=False,
                nvtx=True,
            )
        return ChildConfig(
            run_dir=run_dir,
            mode="light",
            trace_start=self.trace_start,
            trace_steps=self.trace_steps,
            snapshot_at=self.snapshot_at,
            history_max_entries=self.history_max_entries,
            memory_stats_interval_ms=self.memory_stats_interval_ms,
            gpu_time_every=self.gpu_time_every,
            sync_debug=self.sync_debug,
            nvtx=bool(self.nvtx),
            nvtx_always=self.nvtx == "always",
        )

    def say(self, text: str) -> None:
        """One line to the user on stderr, unless ``quiet``."""
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)


class CaptureMode:
    """One capture mode's part of a run, step by step in the order the launcher calls them; each default does
    nothing. ``expected``: the artifacts this process writes (the manifest lists those missing)."""

    name = ""
    on_signal = None  # (child, signum) -> None: what a signal to gpudiag does instead of reaching the script
    rerun = None  # set by finish() to run the script again (--ncu's launch-window fallback)

    def __init__(self, options: ProfileOptions):
        self.options = options
        self.expected: list[str] = []

    def option_record(self) -> dict:
        """The mode's settings, recorded in the manifest's options."""
        return {}

    def prepare(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        """The command to run for the user's ``command``."""
        return command

    def announce(self, folder: Path, manifest: dict, config: ChildConfig) -> None:
        """Before the child starts: say what the run records."""

    def child_env(self) -> dict:
        """Environment the mode adds for the child."""
        return {}

    def follow(self, folder: Path) -> None:
        """The child has started: follow what it writes."""

    def watch(self, child: Child) -> None:
        """The child has started: start any budget on it."""

    def stop_sampling(self) -> None:
        """The child has ended: stop what sampled it."""

    def after_exit(self, child: Child, killed_by: str | None) -> None:
        """The child has ended (``killed_by``: the signal's name): end what it left running."""

    def finish(
        self, folder: Path, tail: EventsTail, killed_by: str | None, start_ns: int, faults: list, notes: list
    ) -> None:
        """After each run of the child: add the mode's faults and notes for the manifest."""

    def prepare_rerun(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        """The command to run again, when ``finish`` set ``rerun``."""
        raise NotImplementedError(f"the {self.name} mode never runs the script twice")
