"""The ncu command that --ncu runs: its options, its command line, its log (progress and errors), the CSV
export, and what to say when a window matched nothing. The mode that runs it is :mod:`diagnose.launch.ncu_mode`.

Defaults are chosen so a training job finishes in minutes: five sections (speed of
light, memory workload incl. L2, occupancy, launch statistics, source counters) and six
metrics (global load/store sectors, requests, bytes used per sector): 14 replay passes per
kernel on an H200, where ``--set full`` needs 38 (the four sections alone 11, with
SourceCounters 13; docs/profile.md), ``--clock-control none`` (the GPU keeps
the clocks training sees), kernel replay, no source import, and a bounded window: the
kernels of one training step, found through the NVTX start/end range the bootstrap opens
per step (``gpudiag.step_<K>``), capped at ``--ncu-max-launches``. ``--launch-skip`` /
``--launch-count`` switch to a plain launch window. ncu's own output goes to
ncu/ncu.log; gpudiag reads it for progress and errors and keeps the script's output clean.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from diagnose.launch.child_config import nvtx_range_name
from parsers.errors import InputError

# SourceCounters: each global access's excess sectors and its source line (memory_access); no --import-source
# needed for file:line, which comes from the kernel's line info
DEFAULT_SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "SourceCounters")
# loads vs stores on the CSV page too (the .ncu-rep also has it per instruction): one more pass; the section that
# holds them (MemoryWorkloadAnalysis_Tables) would cost 21 (34 passes instead of 13, H200, 2026-12-04)
DEFAULT_METRICS = tuple(
    f"{m}_{d}.{s}"
    for d in ("ld", "st")
    for m, s in (
        ("l1tex__t_sectors_pipe_lsu_mem_global_op", "sum"),
        ("l1tex__t_requests_pipe_lsu_mem_global_op", "sum"),
        ("smsp__sass_average_data_bytes_per_sector_mem_global_op", "ratio"),
    )
) + (
    # the data's reuse (l2: global-load sectors at L1 and at L2 per DRAM sector read) and whether the L1 data
    # pipe carries shared-memory traffic (a tiled kernel)
    "dram__sectors_read.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
)
DEFAULT_STEP = 5
DEFAULT_MAX_LAUNCHES = 100
# --ncu-timeout: the wall-time budget of an --ncu run, after which the script is stopped (ncu keeps what it
# profiled). A stop (the budget, or SIGINT/SIGTERM to gpudiag) ends the application under ncu first, so ncu
# writes its report; whatever is still alive STOP_GRACE_S later is killed, so a stop ends within ~10 s.
DEFAULT_TIMEOUT_S = 600.0
STOP_GRACE_S = 8.0
# Compiler and tool processes a training script starts that never run a CUDA kernel of its own: XLA runs ptxas
# and nvlink per compiled module, Triton ptxas and gcc. ncu follows every child process by default; on the H200
# (2026-12-04, tools/ncu_jax_crash_probe.py) ncu 2025.3.1 itself crashed with a segmentation fault in most runs
# of an unchanged JAX script, which starts ptxas and nvlink, and in none with --target-processes application-only.
# They are excluded, with their children, from ncu's process tracking (ncu --target-processes-filter exclude-tree).
HELPER_PROCESSES = ("ptxas", "nvlink", "fatbinary", "nvdisasm", "cuobjdump", "gcc", "cc", "ld", "nvidia-smi")
REPLAY_MODES = ("kernel", "application")
# --after-window: after the window the script keeps running under ncu, every kernel launch intercepted (a char-level
# GPT's 600 iterations took 150 s under ncu against 20 s plain on the H200, issue 32), so by default it is stopped
# once the window is profiled; "continue" runs it to its end
AFTER_WINDOW = ("stop", "continue")
CLOCK_CONTROLS = ("none", "base")
PERMISSION_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
_PROFILING_LINE = re.compile(r'==PROF== Profiling "([^"]*)"')
# the start of a launch's line: ``==PROF== Profiling "Kernel2" - 3 (4/100): `` with a launch count, else
# ``==PROF== Profiling "Kernel2" - 3: `` (ncu prints the progress after it)
_PROFILING_START = re.compile(r'==PROF== Profiling "([^"]*)" - (\d+)(?: \(|:)')
LOG_POLL_S = 0.02  # how often the log is read: a launch takes ncu 50 ms or more, so its start is timed to ~20 ms


@dataclass(frozen=True)
class NcuOptions:
    ncu_path: str | None = None
    full_set: bool = False
    sections: tuple[str, ...] = DEFAULT_SECTIONS
    metrics: tuple[str, ...] = DEFAULT_METRICS  # added to the sections (not to --set full, which has them)
    replay_mode: str = "kernel"
    clock_control: str = "none"
    step: int | None = None  # None: DEFAULT_STEP unless a launch window is given
    max_launches: int = DEFAULT_MAX_LAUNCHES  # cap inside the step window; 0 = every kernel of the step
    timeout_s: float = DEFAULT_TIMEOUT_S  # wall-time budget of the run; 0 = none
    after_window: str = "stop"  # AFTER_WINDOW: end the script once the window is profiled, or let it run on
    launch_skip: int | None = None
    launch_count: int | None = None
    kernel_name: str | None = None  # a regex (the "regex:" prefix is added)
    nvtx_include: str | None = None  # a raw --nvtx-include expression, overrides the step's range
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # processes ncu must not follow (HELPER_PROCESSES); () when this ncu has no --target-processes-filter
    exclude_processes: tuple[str, ...] = HELPER_PROCESSES

    def __post_init__(self):
        if self.replay_mode not in REPLAY_MODES:
            raise InputError(
                None, f"--ncu-replay-mode must be one of {', '.join(REPLAY_MODES)}, not {self.replay_mode!r}"
            )
        if self.clock_control not in CLOCK_CONTROLS:
            raise InputError(
                None, f"--ncu-clock-control must be one of {', '.join(CLOCK_CONTROLS)}, not {self.clock_control!r}"
            )
        launch_window = self.launch_skip is not None or self.launch_count is not None
        if launch_window and (self.step is not None or self.nvtx_include is not None):
            raise InputError(
                None,
                "choose one ncu window: --ncu-step/--ncu-nvtx-include (a training step) or "
                "--launch-skip/--launch-count (kernel launches), not both",
            )
        for name in ("step", "launch_skip", "launch_count", "max_launches"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InputError(None, f"--{name.replace('_', '-')} must be >= 0, not {value}")
        if self.launch_count == 0:
            raise InputError(None, "--launch-count must be at least 1")
        if not self.timeout_s >= 0:
            raise InputError(None, f"--ncu-timeout must be >= 0 seconds, not {self.timeout_s}")
        if self.after_window not in AFTER_WINDOW:
            raise InputError(
                None, f"--after-window must be one of {', '.join(AFTER_WINDOW)}, not {self.after_window!r}"
            )

    @property
    def window_kind(self) -> str:
        return "launches" if self.launch_skip is not None or self.launch_count is not None else "step"

    @property
    def window_step(self) -> int:
        return DEFAULT_STEP if self.step is None else self.step

    @property
    def nvtx_expression(self) -> str:
        return self.nvtx_include or nvtx_range_name(self.window_step)

    @property
    def window_end_known(self) -> bool:
        """Whether gpudiag sees the window end: the step's record written, or the launch count profiled (a raw
        --ncu-nvtx-include range, or a launch window without a count, ends where only the script knows)."""
        if self.window_kind == "launches":
            return self.launch_count is not None
        return self.nvtx_include is None

    def describe_after_window(self) -> str:
        """What happens once the window is profiled, as the start-up line says it."""
        if self.after_window == "continue":
            return "then the script runs to its end under ncu (--after-window continue: every launch intercepted)"
        if not self.window_end_known:
            return "then the script runs to its end under ncu (gpudiag cannot see where this window ends)"
        return "then the script is stopped (--after-window continue lets it finish under ncu)"

    def describe_window(self) -> str:
        if self.window_kind == "launches":
            return f"{self.launch_count or 'all'} launches after skipping {self.launch_skip or 0}"
        cap = f", at most {self.max_launches} launches" if self.max_launches else ""
        if self.nvtx_include:
            return f"kernels inside NVTX {self.nvtx_include!r}{cap}"
        return f"kernels of step {self.window_step} (NVTX range {self.nvtx_expression}){cap}"


# Environment for the profiled script under ncu, each unless the user set it. JAX preallocates
# 75 % of GPU memory as one pool; ncu's kernel replay saves and restores the memory a kernel may
# write allocation by allocation, so with the pool a replay pass may copy ~100 GB: on the H200 a
# JAX step under ncu took 0.73 s and the first profiled kernel 34 s (docs/profile.md).
NCU_CHILD_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def child_env_additions(environ) -> dict[str, str]:
    """The :data:`NCU_CHILD_ENV` entries the user's environment does not already set."""
    return {k: v for k, v in NCU_CHILD_ENV.items() if k not in environ}


def find_ncu(explicit: str | None = None) -> str:
    """The ncu executable: ``explicit``, PATH, then the usual CUDA install places."""
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        found = shutil.which(explicit)
        if found:
            return found
        raise InputError(explicit, "is not an executable ncu; pass the path of Nsight Compute's ncu to --ncu-path")
    found = shutil.which("ncu")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "ncu"), "/usr/local/cuda/bin/ncu"]
    candidates += sorted(glob.glob("/usr/local/cuda-*/bin/ncu"), reverse=True)
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise InputError(
        None,
        "ncu (Nsight Compute CLI) is not on PATH nor in /usr/local/cuda/bin: install Nsight "
        "Compute (it ships with the CUDA toolkit), add it to PATH, or pass --ncu-path /path/to/ncu",
    )


def supports_process_filter(ncu: str) -> bool:
    """Whether this ncu has ``--target-processes-filter`` with ``exclude-tree`` (from its ``--help``)."""
    try:
        r = subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--target-processes-filter" in r.stdout and "exclude-tree" in r.stdout


def build_command(ncu: str, options: NcuOptions, run_dir: str | os.PathLike, user_command: list[str]) -> list[str]:
    """The full ncu command line that runs ``user_command``."""
    run_dir = Path(run_dir)
    cmd = [ncu, "--target-processes", "all", "--clock-control", options.clock_control]
    if options.exclude_processes and "--target-processes-filter" not in options.extra_args:
        cmd += ["--target-processes-filter", ",".join(f"exclude-tree:{name}" for name in options.exclude_processes)]
    if options.full_set:
        cmd += ["--set", "full"]
    else:
        for section in options.sections:
            cmd += ["--section", section]
        if options.metrics:
            cmd += ["--metrics", ",".join(options.metrics)]
    cmd += ["--replay-mode", options.replay_mode, "--import-source", "no"]
    if options.window_kind == "launches":
        if options.launch_skip:
            cmd += ["--launch-skip", str(options.launch_skip)]
        if options.launch_count is not None:
            cmd += ["--launch-count", str(options.launch_count)]
    else:
        cmd += ["--nvtx", "--nvtx-include", options.nvtx_expression]
        if options.max_launches:
            cmd += ["--launch-count", str(options.max_launches)]
    if options.kernel_name:
        name = options.kernel_name
        cmd += ["--kernel-name", name if name.startswith("regex:") else f"regex:{name}"]
    cmd += list(options.extra_args)
    cmd += ["-f", "-o", str(run_dir / "ncu" / "report"), "--log-file", str(run_dir / "ncu" / "ncu.log")]
    return cmd + list(user_command)


def export_command(ncu: str, report: str | os.PathLike) -> list[str]:
    return [ncu, "--import", os.fspath(report), "--csv", "--page", "raw", "--print-units", "base"]


@dataclass
class NcuLog:
    """What ncu's log said: launches profiled, errors, warnings."""

    launches: int = 0
    last_kernel: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    permission_denied: bool = False
    no_kernels: bool = False
    # (ncu's launch ID, kernel name as ncu prints it, unix ns when the follower first saw the launch start)
    launch_starts: list[tuple[int, str, int]] = field(default_factory=list)

    def saw_start(self, text: str, t_ns: int) -> None:
        """Note the launches whose ``Profiling`` line starts in ``text`` (a whole line or the unfinished last one)."""
        seen = {i for i, _, _ in self.launch_starts[-4:]}
        for m in _PROFILING_START.finditer(text):
            launch = int(m.group(2))
            if launch not in seen:
                self.launch_starts.append((launch, m.group(1), t_ns))
                seen.add(launch)

    def feed(self, line: str) -> str | None:
        """Take one log line; return it when the user should see it now."""
        line = line.rstrip("\n")
        m = _PROFILING_LINE.search(line)
        if m:
            self.launches += 1
            self.last_kernel = m.group(1)
            return None
        if "ERR_NVGPUCTRPERM" in line:
            first = not self.permission_denied
            self.permission_denied = True
            return line if first else None
        if line.startswith("==ERROR=="):
            self.errors.append(line)
            return line
        if line.startswith("==WARNING=="):
            self.warnings.append(line)
            if "No kernels were profiled" in line:
                self.no_kernels = True
            return line
        return None


class LogFollower:
    """Tails ncu/ncu.log while ncu runs: echoes errors, prints launches profiled every ``interval_s``, and
    notes when each launch's profiling started (ncu writes no wall-clock time of a launch; these put the
    profiled launches on the allocator history's clock, docs/profile.md)."""

    def __init__(self, path: str | os.PathLike, echo, interval_s: float = 10.0):
        self.path = Path(path)
        self.log = NcuLog()
        self._echo = echo
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudiag-ncu-log", daemon=True)
        self._offset = 0
        self._buffer = ""
        self._reported = 0

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> None:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._offset)
                chunk = f.read()
                self._offset = f.tell()
        except OSError:
            return
        self._buffer += chunk
        if chunk:
            self.log.saw_start(self._buffer, time.time_ns())
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            shown = self.log.feed(line)
            if shown:
                self._echo(f"gpudiag: ncu: {shown}")

    def _run(self) -> None:
        last_print = time.monotonic()
        while not self._stop.wait(LOG_POLL_S):
            self._read()
            if time.monotonic() - last_print >= self._interval_s and self.log.launches != self._reported:
                last_print = time.monotonic()
                self._reported = self.log.launches
                self._echo(
                    f"gpudiag: ncu profiled {self.log.launches} kernel launches so far"
                    + (f" (last: {self.log.last_kernel[:80]})" if self.log.last_kernel else "")
                )

    def stop(self) -> NcuLog:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self._read()
        if self._buffer:
            shown = self.log.feed(self._buffer)
            self._buffer = ""
            if shown:
                self._echo(f"gpudiag: ncu: {shown}")
        return self.log


# The fallback when a step window saw no step at all: the script again, under the first launches. A run needs
# this much of its --ncu-timeout left for the second run to be worth starting.
FALLBACK_MIN_LEFT_S = 20.0


def launch_fallback(options: NcuOptions, elapsed_s: float) -> NcuOptions | None:
    """The launch window to run the script again under after a default step window matched nothing because no
    step was ever seen (a script with no optimizer, backward, jitted step or marker that ended before time slices
    began): the first ``max_launches`` launches (100 unless set). None when the user chose the window (an NVTX
    expression) or too little of the --ncu-timeout budget is left."""
    if options.window_kind != "step" or options.nvtx_include:
        return None
    if options.timeout_s and options.timeout_s - elapsed_s < FALLBACK_MIN_LEFT_S:
        return None
    return replace(options, step=None, launch_skip=0, launch_count=options.max_launches or DEFAULT_MAX_LAUNCHES)


def permission_message() -> str:
    return (
        "ncu could not read the GPU performance counters (ERR_NVGPUCTRPERM): this user may not profile. "
        "Run as root (sudo -E gpudiag profile --ncu ...), or allow all users: put "
        "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/nvidia-profiling.conf and "
        f"reload the driver (or reboot); in a container add --cap-add=SYS_ADMIN. See {PERMISSION_URL}"
    )


def no_kernel_message(options: NcuOptions, steps_seen: int | None) -> str:
    ran = "" if steps_seen is None else f" The script ran {steps_seen} step(s) under ncu."
    if options.window_kind == "launches":
        return (
            f"ncu profiled no kernel: the window ({options.describe_window()}) matched nothing.{ran} "
            "Lower --launch-skip" + (", or loosen --kernel-name" if options.kernel_name else "") + "."
        )
    fix = (
        f"Choose a step the script reaches with --ncu-step (now {options.window_step})"
        if not options.nvtx_include
        else "Check the --ncu-nvtx-include expression"
    )
    if steps_seen == 0:
        fix = (
            "No step boundary was seen: mark steps with `import diagnose; diagnose.step()` (JAX, or torch "
            "without an optimizer)"
        )
    return (
        f"ncu profiled no kernel: the window ({options.describe_window()}) matched nothing.{ran} {fix}, "
        "or profile by launches with --launch-skip N --launch-count M"
        + (", or loosen --kernel-name" if options.kernel_name else "")
        + "."
    )


def export_raw_csv(
    ncu: str, report: str | os.PathLike, target: str | os.PathLike, timeout_s: float = 600
) -> str | None:
    """``ncu --import report --csv --page raw --print-units base`` into ``target`` (whole or not at all).
    Returns None on success, else what went wrong."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            result = subprocess.run(export_command(ncu, report), stdout=out, stderr=subprocess.PIPE, timeout=timeout_s)
        if result.returncode != 0:
            return (result.stderr or b"").decode(errors="replace").strip()[-500:] or f"exit code {result.returncode}"
        os.replace(tmp, target)
        return None
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    finally:
        if tmp.exists():
            tmp.unlink()
