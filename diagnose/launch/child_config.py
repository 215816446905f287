"""What the parent tells the instrumented child, through environment variables.

The variables are the documented interface (docs/profile.md): the parent writes them
with :meth:`ChildConfig.to_env`, the bootstrap reads them with :func:`from_env`. Env vars
reach every Python process of the job (torchrun's workers too). Standard library only:
this module is loaded inside the user's training process.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

ENV_RUN_DIR = "GPUDIAG_RUN_DIR"
ENV_MODE = "GPUDIAG_MODE"  # light | ncu | in-process
ENV_TRACE_START = "GPUDIAG_TRACE_START"  # first step of the profiler window
ENV_TRACE_STEPS = "GPUDIAG_TRACE_STEPS"  # steps in the window; 0 = no trace
ENV_SNAPSHOT_AT = "GPUDIAG_SNAPSHOT_AT"  # "window" (end of the trace window), a step number, or "exit"
ENV_HISTORY_MAX_ENTRIES = "GPUDIAG_HISTORY_MAX_ENTRIES"  # allocator history ring size; 0 = off
ENV_MEMORY_STATS_INTERVAL_MS = "GPUDIAG_MEMORY_STATS_INTERVAL_MS"  # at most one memory_stats record per interval
ENV_GPU_TIME_EVERY = "GPUDIAG_GPU_TIME_EVERY"  # CUDA-event GPU time on every k-th step; 0 = auto
ENV_SYNC_DEBUG = "GPUDIAG_SYNC_DEBUG"  # 1: capture synchronizing calls inside the trace window
ENV_NVTX = "GPUDIAG_NVTX"  # 1: NVTX ranges per step (gpudiag.step_<N>) when an NVTX tool can receive them;
# always: whether or not one seems to be there; 0: none
ENV_DISABLE = "GPUDIAG_DISABLE"  # 1: the bootstrap does nothing at all

MODES = ("light", "ncu", "in-process")
DEFAULT_WINDOW_STEPS = 3  # the trace window's default length (--trace-steps)
NVTX_RANGE_PREFIX = "gpudiag.step_"  # no "/" in it: ncu's --nvtx-include reads "/" as nesting


def nvtx_range_name(step: int) -> str:
    return f"{NVTX_RANGE_PREFIX}{step}"


@dataclass(frozen=True)
class ChildConfig:
    run_dir: str
    mode: str = "light"
    trace_start: int = 10
    trace_steps: int = 3
    snapshot_at: str = "window"
    history_max_entries: int = 100_000
    memory_stats_interval_ms: float = 500.0
    gpu_time_every: int = 0  # 0: every step unless the events cost more than 0.2 % of a step (runtime/gpu_time.py)
    sync_debug: bool = True
    nvtx: bool = True
    nvtx_always: bool = False  # ranges even when no NVTX tool is in the environment (ncu mode pushes them anyway)

    def to_env(self) -> dict[str, str]:
        return {
            ENV_RUN_DIR: os.path.abspath(self.run_dir),
            ENV_MODE: self.mode,
            ENV_TRACE_START: str(self.trace_start),
            ENV_TRACE_STEPS: str(self.trace_steps),
            ENV_SNAPSHOT_AT: str(self.snapshot_at),
            ENV_HISTORY_MAX_ENTRIES: str(self.history_max_entries),
            ENV_MEMORY_STATS_INTERVAL_MS: str(self.memory_stats_interval_ms),
            ENV_GPU_TIME_EVERY: str(self.gpu_time_every),
            ENV_SYNC_DEBUG: "1" if self.sync_debug else "0",
            ENV_NVTX: ("always" if self.nvtx_always else "1") if self.nvtx else "0",
        }

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def trace_stop(self) -> int:
        """First step after the window."""
        return self.trace_start + self.trace_steps

    @property
    def snapshot_step(self) -> int | None:
        """The step after which the allocator history is written; None = at exit."""
        if self.snapshot_at == "exit":
            return None
        if self.snapshot_at == "window":
            # without a trace window (--trace-steps 0), where the default window would have ended: the history
            # recorded until exit cost launch-bound steps about +32 % on the H200 (issue 17)
            return self.trace_stop - 1 if self.trace_steps > 0 else self.trace_start + DEFAULT_WINDOW_STEPS - 1
        return int(self.snapshot_at)


def from_env(environ=None) -> ChildConfig | None:
    """The configuration the parent set, or None when this process is not under gpudiag."""
    env = os.environ if environ is None else environ
    run_dir = env.get(ENV_RUN_DIR)
    if not run_dir or env.get(ENV_DISABLE) == "1":
        return None
    defaults = ChildConfig(run_dir=run_dir)

    def num(name, default, cast):
        try:
            return cast(env[name]) if env.get(name, "") != "" else default
        except ValueError:
            return default

    snapshot_at = env.get(ENV_SNAPSHOT_AT, defaults.snapshot_at)
    if snapshot_at not in ("window", "exit") and not snapshot_at.isdigit():
        snapshot_at = defaults.snapshot_at
    mode = env.get(ENV_MODE, "light")
    return ChildConfig(
        run_dir=run_dir,
        mode=mode if mode in MODES else "light",
        trace_start=max(0, num(ENV_TRACE_START, defaults.trace_start, int)),
        trace_steps=max(0, num(ENV_TRACE_STEPS, defaults.trace_steps, int)),
        snapshot_at=snapshot_at,
        history_max_entries=max(0, num(ENV_HISTORY_MAX_ENTRIES, defaults.history_max_entries, int)),
        memory_stats_interval_ms=max(0.0, num(ENV_MEMORY_STATS_INTERVAL_MS, defaults.memory_stats_interval_ms, float)),
        gpu_time_every=max(0, num(ENV_GPU_TIME_EVERY, defaults.gpu_time_every, int)),
        sync_debug=env.get(ENV_SYNC_DEBUG, "1") != "0",
        nvtx=env.get(ENV_NVTX, "1") != "0",
        nvtx_always=env.get(ENV_NVTX) == "always",
    )


def rank_from_env(environ=None) -> int | None:
    """The process's global rank as launchers set it (torchrun, MPI, SLURM), or None."""
    env = os.environ if environ is None else environ
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def world_size_from_env(environ=None) -> int | None:
    env = os.environ if environ is None else environ
    for name in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None
