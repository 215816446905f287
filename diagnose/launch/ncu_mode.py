"""--ncu, the Nsight Compute capture mode: the user's command under ncu (diagnose.launch.ncu_command builds it),
ncu's log followed for progress, the run stopped on its wall-time budget or a signal, the report exported to CSV
at the end, and the script run again under a launch window when the step window saw no step. The bootstrap only
marks steps (NVTX ranges and step times): a torch/JAX profiler must not run under ncu.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

from diagnose.launch import fault_reports, ncu_command, ncu_window_end
from diagnose.launch.capture_mode import CaptureMode, ProfileOptions
from diagnose.launch.child_config import ChildConfig
from diagnose.launch.run_progress import EventsTail
from diagnose.launch.supervisor import Child, end_process_group, group_members, signal_name
from parsers import run_folder
from parsers.limits import human_bytes
from parsers.run_records import NCU_FIRST_LOG

KILL_AT_ONCE = ((signal.SIGKILL, 0.0),)  # a second stop, or the stop's grace period over: no more waiting


class NcuMode(CaptureMode):
    """--ncu's own steps: the command under ncu, its log followed for progress, its report exported at the end."""

    name = "ncu"

    def __init__(self, options: ProfileOptions):
        super().__init__(options)
        self.ncu_path = ncu_command.find_ncu(options.ncu.ncu_path)  # before the run folder: no ncu, no folder
        if options.ncu.exclude_processes and not ncu_command.supports_process_filter(self.ncu_path):
            options = self.options = replace(options, ncu=replace(options.ncu, exclude_processes=()))
        self._env: dict = {}
        self._follower = None
        self._stopper = None
        self._window_end = None  # --after-window stop's watcher (ncu_window_end.WindowEnd)
        self.orphans: list[int] = []  # pids of the script's processes still alive when ncu ended
        self._exit_code = None
        # the launch window to run the script again under, when the step window saw no step at all (ncu_command.launch_fallback)
        self.rerun: ncu_command.NcuOptions | None = None
        self._reran = False
        self.stopped_after_window = False  # the run ended by --after-window stop: an expected end, exit code 0

    def option_record(self) -> dict:
        ncu = self.options.ncu
        return {
            "ncu": {
                "window": ncu.describe_window(),
                "full_set": ncu.full_set,
                "replay_mode": ncu.replay_mode,
                "clock_control": ncu.clock_control,
                "after_window": ncu.after_window,
            }
        }

    def prepare(self, folder: Path, command: list[str], manifest: dict) -> list[str]:
        """The command under ncu, recorded in the manifest."""
        self._folder = folder
        (folder / "ncu").mkdir(exist_ok=True)
        child_command = ncu_command.build_command(self.ncu_path, self.options.ncu, folder, command)
        manifest["ncu_command"] = child_command
        self.expected += [run_folder.NCU_REPORT, run_folder.NCU_RAW_CSV]
        return child_command

    def announce(self, folder: Path, manifest: dict, config: ChildConfig) -> None:
        options = self.options
        options.say(
            f"gpudiag: profiling under ncu ({self.ncu_path}): {options.ncu.describe_window()}, "
            f"{options.ncu.describe_after_window()}; ncu output in {folder / run_folder.NCU_LOG}",
        )
        self._env = ncu_command.child_env_additions(os.environ)
        if self._env:
            settings = " ".join(f"{k}={v}" for k, v in self._env.items())
            options.say(
                f"gpudiag: under ncu the script runs with {settings} (set it yourself to override; docs/profile.md)",
            )

    def child_env(self) -> dict:
        return self._env

    def follow(self, folder: Path) -> None:
        """Tail ncu's log while it runs: its errors and the launches profiled."""
        options = self.options
        self._follower = ncu_command.LogFollower(folder / run_folder.NCU_LOG, options.say, options.progress_interval_s)
        self._follower.start()

    def watch(self, child: Child) -> None:
        """Start the wall-time budget (--ncu-timeout) on the running child."""
        self._stopper = NcuStopper(child, self.options.say, self._folder)
        timeout_s = self.options.ncu.timeout_s
        if self._reran and timeout_s:  # the second run gets what the first left of the budget
            self._stopper.start_budget(max(1.0, timeout_s - (time.monotonic() - self._started)), timeout_s)
        else:
            self._started = time.monotonic()
            self._stopper.start_budget(timeout_s)
        ncu = self.options.ncu
        if ncu.after_window == "stop" and ncu.window_end_known:
            log = self._follower.log if self._follower is not None else None
            self._window_end = ncu_window_end.WindowEnd(ncu, self._folder, log, self._stopper.stop)
            self._window_end.start()

    def on_signal(self, child: Child, signum: int) -> None:
        """SIGINT/SIGTERM/SIGHUP to gpudiag: stop the application under ncu (ncu writes what it has), bounded."""
        stopper = self._stopper or NcuStopper(child, self.options.say, self._folder)
        self._stopper = stopper
        stopper.stop(f"{signal_name(signum)} to gpudiag", signum)

    def after_exit(self, child: Child, killed_by: str | None) -> None:
        if self._stopper is not None:
            self._stopper.cancel()
        if self._window_end is not None:
            self._window_end.cancel()
        # ncu gone while the application it ran still lives: ncu died (on the H200 its wrapper printed
        # "Segmentation fault" and exited 139 under a JAX script, which then ran on, orphaned, for minutes)
        pid, self._exit_code = child.process.pid, child.process.returncode
        self.orphans = [p for p in group_members(pid) if p != pid]
        if killed_by or self.orphans:
            end_process_group(pid)  # the application ncu ran is orphaned: end it (SIGTERM, SIGKILL 5 s later)

    def finish(
        self, folder: Path, tail: EventsTail, killed_by: str | None, start_ns: int, faults: list, notes: list
    ) -> None:
        """A killed ncu leaves a partial report (a fault); else the CSV export and what to say about the run."""
        log = self._follower.stop()
        stopped = self._stopper.reason if self._stopper is not None else None
        after_window = stopped == ncu_window_end.REASON
        if after_window:
            steps = max((max(s) for s in tail.steps.values() if s), default=None) if tail.steps else None
            notes.append(
                f"the script was stopped {self._stopper.after_s:.0f} s after it began, once the window "
                f"({self.options.ncu.describe_window()}) was profiled, as --after-window stop asks: "
                f"{log.launches} kernel launches profiled"
                + (f", the last step recorded {steps}" if steps is not None else "")
                + "; the rest of the script did not run (--after-window continue runs it under ncu)"
            )
            self.stopped_after_window = True
        elif stopped:
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
        fallback = ncu_command.launch_fallback(self.options.ncu, elapsed_ns / 1e9)
        if fallback is None:
            return False
        text = (
            f"no step was seen under ncu, so the step window ({self.options.ncu.describe_window()}) matched no "
            f"kernel: the script runs again under ncu with a launch window ({fallback.describe_window()}: "
            "start-up work included); mark steps with diagnose.step() to profile one step instead"
        )
        self.options.say(f"gpudiag: {text}")
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
        child_command = ncu_command.build_command(self.ncu_path, fallback, folder, command)
        manifest["ncu_command"] = child_command
        self.orphans, self._exit_code = [], None
        return child_command


class NcuStopper:
    """Ends an --ncu run on its wall-time budget or on a signal, within about 10 s.

    The application under ncu is stopped first (the signal given, SIGTERM on the budget): ncu then
    writes its report with the launches it profiled and exits. A process of the group still alive
    ``ncu_command.STOP_GRACE_S`` later (a kernel replay that does not return, ncu itself) is killed. Under
    ncu a signal sent to ncu alone does not end the application: on the H200 a JAX script had not
    ended 4 minutes after SIGTERM (issue 17).

    Nor does the application's own SIGTERM handler run under ncu (H100, 2026-12-06: exit 0, no handler, no atexit;
    tools/ncu_signal_probe.py), which cut every stopped run's step log short and lost its allocator snapshot. So the
    processes whose runtime wrote a ``stop-signal`` record get that signal first: they flush and end themselves.
    The rest of the group gets the signal once they have ended, or ``FLUSH_WAIT_S`` later.
    """

    FLUSH_WAIT_S = 20.0

    def __init__(self, child: Child, say, folder: Path | None = None):
        self._child, self._say, self._folder = child, say, folder
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
            end_process_group(ncu_pid, KILL_AT_ONCE)
            return
        self._say(f"gpudiag: {reason}: stopping the script under ncu; ncu writes the kernels it profiled")
        members = set(group_members(ncu_pid))
        flushing = {
            pid: stop_signal for pid, stop_signal in runtime_stop_signals(self._folder).items() if pid in members
        }
        for pid, stop_signal in flushing.items():
            _send(pid, stop_signal)
        ending = threading.Thread(target=self._end, args=(signum, set(flushing)), name="gpudiag-ncu-stop", daemon=True)
        ending.start()

    def _end(self, signum: int, flushing: set[int]) -> None:
        """The rest of the group gets ``signum`` once the flushing processes are gone; then the grace, then kill."""
        ncu_pid = self._child.process.pid
        deadline = time.monotonic() + self.FLUSH_WAIT_S
        while flushing and time.monotonic() < deadline and self._child.process.poll() is None:
            if not flushing & set(group_members(ncu_pid)):
                break
            time.sleep(0.05)
        for pid in group_members(ncu_pid):
            if pid != ncu_pid:
                _send(pid, signum)
        deadline = time.monotonic() + ncu_command.STOP_GRACE_S
        while time.monotonic() < deadline:
            if self._child.process.poll() is not None and not group_members(self._child.process.pid):
                return
            time.sleep(0.1)
        self._say(f"gpudiag: still running {ncu_command.STOP_GRACE_S:g} s after the stop: killing ncu and the script")
        end_process_group(self._child.process.pid, KILL_AT_ONCE)


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def runtime_stop_signals(folder: Path | None) -> dict[int, int]:
    """pid → signal of every process whose runtime said, in a ``stop-signal`` record, that it stops on that signal."""
    if folder is None:
        return {}
    tail = EventsTail(folder)
    tail.poll()
    return tail.stop_signals


def _ncu_killed(options: ProfileOptions, folder: Path, log, killed_by: str) -> dict:
    """ncu died of a signal: keep what it wrote as a partial report (never read as one) and say so."""
    report, partial = folder / run_folder.NCU_REPORT, None
    if report.exists():
        partial = run_folder.NCU_PARTIAL_REPORT
        os.replace(report, folder / partial)
    options.say(
        f"gpudiag: error: ncu was killed ({killed_by}) after profiling {log.launches} kernel launches: "
        "there is no complete ncu report and no CSV"
        + (f" ({partial} keeps what it had written; gpudiag does not read it)" if partial else "")
        + ". Run again; if a time limit or the OOM killer stopped it, profile less: a narrower "
        "window (--ncu-max-launches, --kernel-name) or the default sections instead of --ncu-set full",
    )
    return {
        "kind": "ncu-killed",
        "signal": killed_by,
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
        message = ncu_command.permission_message()
        options.say(f"gpudiag: error: {message}")
        notes.append(message)
    elif log.no_kernels or (not report.exists() and log.launches == 0):
        steps = tail.step_count(0) if tail.steps else 0
        message = ncu_command.no_kernel_message(options.ncu, steps)
        options.say(f"gpudiag: error: {message}")
        notes.append(message)
    if report.exists():
        size = report.stat().st_size
        error = ncu_command.export_raw_csv(ncu_path, report, folder / run_folder.NCU_RAW_CSV)
        if error:
            notes.append(f"ncu --import to raw.csv failed: {error}")
            options.say(f"gpudiag: ncu CSV export failed: {error}")
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
        options.say(text)
        notes.append(text.removeprefix("gpudiag: "))
    return notes
