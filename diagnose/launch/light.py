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
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from diagnose.launch import fault_reports, run_dir, run_manifest
from diagnose.launch import ncu as ncu_mode
from diagnose.launch.child_config import ENV_DISABLE, ChildConfig
from diagnose.launch.nvml_sampler import DEFAULT_HZ, NvmlSampler
from diagnose.launch.run_progress import EventsTail, ProgressPrinter
from diagnose.launch.supervisor import Child, group_members
from parsers import run_folder
from parsers.errors import InputError
from parsers.limits import human_bytes

SITECUSTOMIZE_DIR = str(Path(__file__).resolve().parent / "sitecustomize")
NCU_FIRST_LOG = "ncu/ncu.step-window.log"  # ncu's log of the first run when --ncu ran the script again


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
    ncu: ncu_mode.NcuOptions | None = None
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


def _say(options: ProfileOptions, text: str) -> None:
    if not options.quiet:
        print(text, file=sys.stderr, flush=True)


def run_profiled(command: list[str] | tuple[str, ...], options: ProfileOptions = ProfileOptions()) -> Run:
    """Run ``command`` under gpudiag and return the Run (exit code = the script's, 128+N for signal N)."""
    command = [str(c) for c in command]
    if not command:
        raise InputError(None, "no command to profile: give it after --, e.g. gpudiag profile -- python train.py")
    mode = _NcuMode(options) if options.ncu is not None else _LightMode(options)
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
    exit_code, killed_by, faults = _run_child(mode, options, folder, child_command, env, tail)
    notes: list[str] = []
    mode.finish(folder, tail, killed_by, start_ns, faults, notes)
    if mode.rerun is not None:  # --ncu saw no step: the same command again under a launch window, by itself
        child_command = mode.prepare_rerun(folder, command, manifest)
        env = child_environment(config, extra={**mode.child_env(), **options.extra_env, ENV_DISABLE: "1"})
        exit_code, killed_by, more_faults = _run_child(mode, options, folder, child_command, env, tail)
        faults += more_faults
        mode.finish(folder, tail, killed_by, start_ns, faults, notes)
    return _close_run(options, folder, manifest, exit_code, mode.expected, notes, faults, tail)


def _run_child(mode, options: ProfileOptions, folder: Path, child_command: list[str], env: dict, tail: EventsTail):
    """One run of the child to its end: (exit code, the signal that killed it or None, the faults it reported)."""
    printer = ProgressPrinter(tail, options.progress_interval_s) if not options.quiet else None
    listener = fault_reports.Listener()
    try:
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
    finally:
        if printer:
            printer.stop()
        mode.stop_sampling()
    killed_by = _signal_name(-child.process.returncode) if child.process.returncode < 0 else None
    mode.after_exit(child, killed_by)
    tail.poll()
    faults = listener.receive()
    listener.close()
    return exit_code, killed_by, faults


class _LightMode:
    """Light mode's own steps: the command as it is, NVML sampled from this process while it runs."""

    name = "light"
    on_signal = None  # signals to gpudiag go to the script as they are
    rerun = None  # light mode never runs the script twice

    def __init__(self, options: ProfileOptions):
        self.options = options
        self.expected: list[str] = []  # artifacts this process writes
        self._sampler = None

    def option_record(self) -> dict:
        return {}

    def prepare(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        return command

    def announce(self, folder: Path, manifest: dict, config: ChildConfig) -> None:
        """Start NVML sampling and say what the run records."""
        options = self.options
        if options.nvml:
            sampler = NvmlSampler(
                folder / run_folder.NVML_CSV,
                options.nvml_hz,
                on_stop=lambda stopped: _say(options, _nvml_stopped_line(stopped)),
            )
            if sampler.start():
                self.expected.append(run_folder.NVML_CSV)
                self._sampler = sampler
            else:
                manifest["unavailable"][run_folder.NVML_CSV] = sampler.unavailable_reason
                _say(
                    options, f"gpudiag: no NVML samples: {sampler.unavailable_reason}; the run goes on without nvml.csv"
                )
        if config.trace_steps:
            _say(
                options,
                f"gpudiag: light mode; profiler trace of steps {config.trace_start}-{config.trace_stop - 1}; "
                f"writing {folder}",
            )

    def child_env(self) -> dict:
        return {}

    def follow(self, folder: Path) -> None:
        pass

    def watch(self, child: Child) -> None:
        pass

    def stop_sampling(self) -> None:
        if self._sampler:
            self._sampler.stop()

    def after_exit(self, child: Child, killed_by: str | None) -> None:
        pass

    def finish(
        self, folder: Path, tail: EventsTail, killed_by: str | None, start_ns: int, faults: list, notes: list
    ) -> None:
        if self._sampler is not None and self._sampler.stopped:
            faults.append({**self._sampler.stopped, "artifact": run_folder.NVML_CSV})


class _NcuMode:
    """--ncu's own steps: the command under ncu, its log followed for progress, its report exported at the end."""

    name = "ncu"

    def __init__(self, options: ProfileOptions):
        self.options = options
        self.ncu_path = ncu_mode.find_ncu(options.ncu.ncu_path)  # before the run folder: no ncu, no folder
        if options.ncu.exclude_processes and not ncu_mode.supports_process_filter(self.ncu_path):
            options = self.options = replace(options, ncu=replace(options.ncu, exclude_processes=()))
        self.expected: list[str] = []  # artifacts this process writes
        self._env: dict = {}
        self._follower = None
        self._stopper = None
        self.orphans: list[int] = []  # pids of the script's processes still alive when ncu ended
        self._exit_code = None
        # the launch window to run the script again under, when the step window saw no step at all (ncu.launch_fallback)
        self.rerun: ncu_mode.NcuOptions | None = None
        self._reran = False

    def option_record(self) -> dict:
        ncu = self.options.ncu
        return {
            "ncu": {
                "window": ncu.describe_window(),
                "full_set": ncu.full_set,
                "replay_mode": ncu.replay_mode,
                "clock_control": ncu.clock_control,
            }
        }

    def prepare(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        """The command under ncu, recorded in the manifest."""
        self._folder = folder
        (folder / "ncu").mkdir(exist_ok=True)
        child_command = ncu_mode.build_command(self.ncu_path, self.options.ncu, folder, command)
        manifest["ncu_command"] = child_command
        self.expected += [run_folder.NCU_REPORT, run_folder.NCU_RAW_CSV]
        return child_command

    def announce(self, folder: Path, manifest: dict, config: ChildConfig) -> None:
        options = self.options
        _say(
            options,
            f"gpudiag: profiling under ncu ({self.ncu_path}): {options.ncu.describe_window()}; "
            f"ncu output in {folder / run_folder.NCU_LOG}",
        )
        self._env = ncu_mode.child_env_additions(os.environ)
        if self._env:
            settings = " ".join(f"{k}={v}" for k, v in self._env.items())
            _say(
                options,
                f"gpudiag: under ncu the script runs with {settings} (set it yourself to override; docs/profile.md)",
            )

    def child_env(self) -> dict:
        return self._env

    def follow(self, folder: Path) -> None:
        """Tail ncu's log while it runs: its errors and the launches profiled."""
        options = self.options
        self._follower = ncu_mode.LogFollower(
            folder / run_folder.NCU_LOG, lambda t: _say(options, t), options.progress_interval_s
        )
        self._follower.start()

    def watch(self, child: Child) -> None:
        """Start the wall-time budget (--ncu-timeout) on the running child."""
        self._stopper = NcuStopper(child, lambda t: _say(self.options, t))
        timeout_s = self.options.ncu.timeout_s
        if self._reran and timeout_s:  # the second run gets what the first left of the budget
            self._stopper.start_budget(max(1.0, timeout_s - (time.monotonic() - self._started)), timeout_s)
        else:
            self._started = time.monotonic()
            self._stopper.start_budget(timeout_s)

    def on_signal(self, child: Child, signum: int) -> None:
        """SIGINT/SIGTERM/SIGHUP to gpudiag: stop the application under ncu (ncu writes what it has), bounded."""
        stopper = self._stopper or NcuStopper(child, lambda t: _say(self.options, t))
        self._stopper = stopper
        stopper.stop(f"{_signal_name(signum)} to gpudiag", signum)

    def stop_sampling(self) -> None:
        pass

    def after_exit(self, child: Child, killed_by: str | None) -> None:
        if self._stopper is not None:
            self._stopper.cancel()
        # ncu gone while the application it ran still lives: ncu died (on the H200 its wrapper printed
        # "Segmentation fault" and exited 139 under a JAX script, which then ran on, orphaned, for minutes)
        pid, self._exit_code = child.process.pid, child.process.returncode
        self.orphans = [p for p in group_members(pid) if p != pid]
        if killed_by or self.orphans:
            _stop_process_group(pid)  # the application ncu ran is orphaned: end it

    def finish(
        self, folder: Path, tail: EventsTail, killed_by: str | None, start_ns: int, faults: list, notes: list
    ) -> None:
        """A killed ncu leaves a partial report (a fault); else the CSV export and what to say about the run."""
        log = self._follower.stop()
        stopped = self._stopper.reason if self._stopper is not None else None
        if stopped:
            notes.append(
                f"the run was stopped ({stopped}) {self._stopper.after_s:.0f} s after it began: the script under ncu "
                f"was ended; {'ncu was killed too, ' if killed_by else ''}{log.launches} kernel launches had been "
                "profiled"
            )
            faults.append({"kind": "ncu-stopped", "reason": stopped, "after_s": round(self._stopper.after_s, 1)})
        if not killed_by and self.orphans:
            killed_by = f"exit code {self._exit_code}, with the script still running"
            notes.append(
                f"ncu ended (exit code {self._exit_code}) while the script under it still ran: "
                f"{len(self.orphans)} process(es) of the script were stopped"
            )
        if killed_by:
            faults.append(_ncu_killed(self.options, folder, log, killed_by))
            return
        elapsed_ns = time.time_ns() - start_ns
        if not stopped and not self._reran and self._exit_code == 0 and self._fall_back(log, tail, elapsed_ns, notes):
            return
        notes += _finish_ncu(self.options, self.ncu_path, folder, log, tail, elapsed_ns)
        if log.launch_starts and (folder / run_folder.NCU_REPORT).exists():
            _write_launch_starts(folder, log.launch_starts, faults)

    def _fall_back(self, log, tail: EventsTail, elapsed_ns: int, notes: list) -> bool:
        """No step was seen, so the step window matched no kernel: choose the launch window to run the script
        again under (issue 17: fall back by itself, and say so, instead of ending in an error)."""
        no_kernel = log.no_kernels or (not log.launches and not (self._folder / run_folder.NCU_REPORT).exists())
        steps = tail.step_count(0) if tail.steps else 0
        if not no_kernel or steps or log.permission_denied:
            return False
        fallback = ncu_mode.launch_fallback(self.options.ncu, elapsed_ns / 1e9)
        if fallback is None:
            return False
        text = (
            f"no step was seen under ncu, so the step window ({self.options.ncu.describe_window()}) matched no "
            f"kernel: the script runs again under ncu with a launch window ({fallback.describe_window()}: "
            "start-up work included); mark steps with diagnose.step() to profile one step instead"
        )
        _say(self.options, f"gpudiag: {text}")
        notes.append(text)
        self.rerun = fallback
        return True

    def prepare_rerun(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        """The command again under the fallback launch window; the first run's ncu log is kept beside."""
        fallback, self.rerun, self._reran = self.rerun, None, True
        first_log = folder / run_folder.NCU_LOG
        if first_log.exists():
            os.replace(first_log, folder / NCU_FIRST_LOG)
        manifest["ncu_fallback"] = {
            "reason": "no step seen",
            "first_window": self.options.ncu.describe_window(),
            "window": fallback.describe_window(),
            "first_command": manifest.get("ncu_command"),
            "first_log": NCU_FIRST_LOG,
        }
        self.options = replace(self.options, ncu=fallback)
        child_command = ncu_mode.build_command(self.ncu_path, fallback, folder, command)
        manifest["ncu_command"] = child_command
        self.orphans, self._exit_code = [], None
        return child_command


class NcuStopper:
    """Ends an --ncu run on its wall-time budget or on a signal, within about 10 s.

    The application under ncu is stopped first (the signal given, SIGTERM on the budget): ncu then
    writes its report with the launches it profiled and exits. A process of the group still alive
    ``ncu.STOP_GRACE_S`` later (a kernel replay that does not return, ncu itself) is killed. Under
    ncu a signal sent to ncu alone does not end the application: on the H200 a JAX script had not
    ended 4 minutes after SIGTERM (issue 17).
    """

    def __init__(self, child: Child, say):
        self._child, self._say = child, say
        self._started = time.monotonic()
        self._timer = None
        self._lock = threading.Lock()
        self.reason: str | None = None
        self.after_s = 0.0

    def start_budget(self, timeout_s: float, whole_s: float | None = None) -> None:
        """Stop the run ``timeout_s`` from now; ``whole_s``: the --ncu-timeout this is what is left of."""
        if timeout_s and timeout_s > 0:
            reason = f"--ncu-timeout {whole_s or timeout_s:g} s"
            self._timer = threading.Timer(timeout_s, self.stop, args=(reason, signal.SIGTERM))
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def stop(self, reason: str, signum: int = signal.SIGTERM) -> None:
        with self._lock:
            first = self.reason is None
            if first:
                self.reason, self.after_s = reason, time.monotonic() - self._started
        ncu_pid = self._child.process.pid
        if not first:  # a second signal: no more waiting
            _kill_group(ncu_pid)
            return
        self._say(f"gpudiag: {reason}: stopping the script under ncu; ncu writes the kernels it profiled")
        for pid in group_members(ncu_pid):
            if pid != ncu_pid:
                try:
                    os.kill(pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass
        escalate = threading.Thread(target=self._escalate, name="gpudiag-ncu-stop", daemon=True)
        escalate.start()

    def _escalate(self) -> None:
        deadline = time.monotonic() + ncu_mode.STOP_GRACE_S
        while time.monotonic() < deadline:
            if self._child.process.poll() is not None and not group_members(self._child.process.pid):
                return
            time.sleep(0.1)
        self._say(f"gpudiag: still running {ncu_mode.STOP_GRACE_S:g} s after the stop: killing ncu and the script")
        _kill_group(self._child.process.pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
        _say(
            options,
            f"gpudiag: error: the final manifest.json could not be written "
            f"({fault_reports.describe_error(e)}); {folder} keeps the one written at the start "
            f"(status 'running'): the script ended with exit code {exit_code}",
        )
    _say(
        options,
        f"gpudiag: {tail.summary()}; script exit code {exit_code}"
        + (f"; missing: {', '.join(manifest['missing'])}" if manifest["missing"] else "")
        + (f"; incomplete: {', '.join(manifest['incomplete'])}" if manifest["incomplete"] else ""),
    )
    _say(options, f"Wrote {folder}; next: gpudiag report {folder}")
    return Run(path=folder, exit_code=exit_code, manifest=manifest)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _nvml_stopped_line(stopped: dict) -> str:
    if stopped["kind"] == "disk-full":
        return (
            f"gpudiag: {stopped['error']} writing nvml.csv; NVML sampling stopped after {stopped['rows']} rows "
            "(they are kept), the run goes on"
        )
    return (
        f"gpudiag: NVML stopped answering ({stopped['error']}); nvml.csv keeps the {stopped['rows']} rows "
        "sampled before, the run goes on without NVML"
    )


def _stop_process_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM what is left of the child's process group, SIGKILL it after ``grace_s``."""
    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def _ncu_killed(options: ProfileOptions, folder: Path, log, signal_name: str) -> dict:
    """ncu died of a signal: keep what it wrote as a partial report (never read as one) and say so."""
    report, partial = folder / run_folder.NCU_REPORT, None
    if report.exists():
        partial = run_folder.NCU_PARTIAL_REPORT
        os.replace(report, folder / partial)
    _say(
        options,
        f"gpudiag: error: ncu was killed ({signal_name}) after profiling {log.launches} kernel launches: "
        "there is no complete ncu report and no CSV"
        + (f" ({partial} keeps what it had written; gpudiag does not read it)" if partial else "")
        + ". Run again; if a time limit or the OOM killer stopped it, profile less: a narrower "
        "window (--ncu-max-launches, --kernel-name) or the default sections instead of --ncu-set full",
    )
    return {
        "kind": "ncu-killed",
        "signal": signal_name,
        "launches": log.launches,
        "partial_report": partial,
        "t_ns": time.time_ns(),
    }


def _write_launch_starts(folder: Path, starts: list[tuple[int, str, int]], faults: list) -> None:
    """ncu/launch_starts.csv: when each launch's profiling began, for the L2 × allocator timeline."""
    from diagnose.outputs.atomic_write import atomic_write_text
    from parsers.ncu_launch_starts import format_launch_starts

    try:
        atomic_write_text(folder / run_folder.NCU_LAUNCH_STARTS, format_launch_starts(starts))
    except OSError as e:
        faults.append(
            {"kind": "write-failed", "artifact": run_folder.NCU_LAUNCH_STARTS, "error": fault_reports.describe_error(e)}
        )


def _finish_ncu(
    options: ProfileOptions, ncu_path: str, folder: Path, log, tail: EventsTail, elapsed_ns: int
) -> list[str]:
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
        text = (
            f"gpudiag: ncu profiled {log.launches} kernel launches in {elapsed_ns / 1e9:.1f} s; "
            f"report {human_bytes(size)}"
        )
        if options.ncu.window_kind == "step":
            step_ms = tail.host_ms_of(options.ncu.window_step, 0)
            others = [ms for s, ms in tail.steps.get(0, {}).items() if s != options.ncu.window_step]
            if step_ms is not None and others:
                plain = sorted(others)[len(others) // 2]
                if plain > 0:
                    text += (
                        f"; step {options.ncu.window_step} took {step_ms / 1000:.1f} s under ncu vs "
                        f"{plain:.2f} ms per other step ({step_ms / plain:.0f}x slowdown)"
                    )
        _say(options, text)
        notes.append(text.removeprefix("gpudiag: "))
    return notes
