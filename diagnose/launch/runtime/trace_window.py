"""A profiler trace of a few steady-state steps: torch.profiler or jax.profiler.

The window is short on purpose: torch.profiler with Python stacks slows a step by
2-3x, so it covers ``GPUDIAG_TRACE_STEPS`` steps starting at ``GPUDIAG_TRACE_START``
and the rest of the run stays light. While it is open, sync warnings are captured
(sync_capture); after it closes, each captured sync is given its op and wait time
from the profiler's own events when the two lists line up one to one. ``StepWindow`` is
the runtime's part that opens and closes it; the classes below it drive each profiler.

What the window costs outside its steps is gpudiag's own, and recorded as such: the profiler's start
(``{"kind": "work", "what": "gpudiag", "name": "trace start"}``) and its stop and export of the trace
(``"trace export"``, the whole call with the reading of the window's sync calls after it, written whether or not
the export succeeded), each with the step whose time holds it.
"""

from __future__ import annotations

import sys
import time

from diagnose.launch.fault_reports import is_disk_full
from parsers.run_records import GPUDIAG_TRACE_EXPORT, GPUDIAG_TRACE_START, JAX_TRACE, TRACE, WORK_GPUDIAG


class StepWindow:
    """The run's one profiler window, over steps ``first_step`` to ``last_step``, with sync capture inside.

    The step boundary opens it at ``first_step``, notes each step's start in ``steps`` while ``profiler`` is
    set, and closes it after ``last_step``: the trace is written, then the syncs as sync records."""

    def __init__(self, runtime):
        self._runtime = runtime
        self.first_step = runtime.config.trace_start
        self.last_step = runtime.config.trace_stop - 1
        self.profiler = None  # the running TorchTraceWindow / JaxTraceWindow
        self.steps = []  # (step, t_start_ns) inside the window
        self._sync = None
        self._jax_sync = None  # JaxSyncCapture, when the user imported jax

    def open(self, step: int) -> None:
        runtime = self._runtime
        users = runtime.user_profilers
        if users is not None and users.active:  # one Kineto session a process: the script's own profiler has it
            runtime.faults.log_once(
                "trace",
                "no profiler trace: the script runs its own torch.profiler (read its trace: gpudiag report <trace>)",
            )
            return
        t_ns, started_ns = time.time_ns(), time.perf_counter_ns()
        try:
            from diagnose.launch.runtime.profilers import JaxTraceWindow, TorchTraceWindow

            if runtime.framework == "torch":
                profiler = TorchTraceWindow(sys.modules["torch"], with_cuda=runtime.cuda)
            elif runtime.framework == "jax":
                profiler = JaxTraceWindow(sys.modules["jax"], runtime.in_run_dir(runtime.artifact(JAX_TRACE)))
            else:
                return
            runtime.expect(runtime.artifact(TRACE))
            profiler.start()
        except Exception as e:
            runtime.faults.log_once("trace", f"no profiler trace ({type(e).__name__}: {e})")
            return
        self._own_cost(GPUDIAG_TRACE_START, step, t_ns, time.perf_counter_ns() - started_ns)
        self.profiler = profiler
        self.steps = []
        if runtime.config.sync_debug:
            from diagnose.launch.runtime.sync_capture import SyncWarningCapture

            capture = SyncWarningCapture(lambda: runtime.steps.current_step)
            capture.start(sys.modules.get("torch") if runtime.cuda else None)
            self._sync = capture
            jax = sys.modules.get("jax")
            if jax is not None:
                from diagnose.launch.runtime.jax_sync_capture import JaxSyncCapture

                jax_capture = JaxSyncCapture(lambda: runtime.steps.current_step)
                jax_capture.start(jax)
                self._jax_sync = jax_capture

    def _own_cost(self, name: str, step, t_ns: int, elapsed_ns: int) -> None:
        """A gpudiag work record of the window's own cost (never raises: the window goes on without it)."""
        runtime = self._runtime
        try:
            from diagnose.launch.runtime.periodic_work import write_work

            write_work(runtime, WORK_GPUDIAG, step, t_ns, elapsed_ns, None, name=name)
        except Exception as e:
            if is_disk_full(e):
                runtime.faults.disk_full(e)
            else:
                runtime.faults.log_once("own-cost", f"gpudiag's own cost not recorded ({type(e).__name__}: {e})")

    def close(self, step: int | None = None) -> None:
        """Stop, write the trace, then the sync records; a failed write is reported, never raised. ``step``: the
        step whose time holds the export (the one the boundary starts; at exit the step in progress)."""
        runtime = self._runtime
        if step is None:
            step = runtime.steps.current_step
        profiler, self.profiler = self.profiler, None
        capture, self._sync = self._sync, None
        if capture is not None:
            capture.stop()
        jax_capture, self._jax_sync = self._jax_sync, None
        if jax_capture is not None:
            jax_capture.stop()
        relative = runtime.artifact(TRACE)
        t_ns, started_ns = time.time_ns(), time.perf_counter_ns()
        try:
            profiler.stop_and_export(runtime.in_run_dir(relative))
            runtime.written.add(relative)
        except Exception as e:
            self._own_cost(GPUDIAG_TRACE_EXPORT, step, t_ns, time.perf_counter_ns() - started_ns)
            runtime.faults.artifact_failed(relative, "profiler trace", e)
            return
        try:
            self._write_sync_records(profiler, capture, jax_capture)
        except Exception as e:
            if is_disk_full(e):
                runtime.faults.disk_full(e)
            else:
                runtime.faults.log_once("sync-records", f"sync records not written ({type(e).__name__}: {e})")
        self._own_cost(GPUDIAG_TRACE_EXPORT, step, t_ns, time.perf_counter_ns() - started_ns)

    def close_quietly(self) -> None:
        """Stop the capture and the profiler, exporting the trace when it can (the runtime is switching off)."""
        for capture in (self._sync, self._jax_sync):
            if capture is not None:
                try:
                    capture.stop()
                except Exception:
                    pass
        self._sync = self._jax_sync = None
        if self.profiler is not None:
            try:
                self.profiler.stop_and_export(self._runtime.in_run_dir(self._runtime.artifact(TRACE)))
            except Exception:
                pass
            self.profiler = None

    def stop_without_export(self) -> None:
        """Stop the profiler and the sync capture, writing nothing (the disk is full)."""
        profiler, self.profiler = self.profiler, None
        capture, self._sync = self._sync, None
        jax_capture, self._jax_sync = self._jax_sync, None
        stops = [getattr(capture, "stop", None), getattr(jax_capture, "stop", None), getattr(profiler, "stop", None)]
        for stop in stops:
            if stop is not None:
                try:
                    stop()
                except Exception:
                    pass

    def _write_sync_records(self, profiler, capture, jax_capture=None) -> None:
        from diagnose.launch.runtime.sync_capture import sync_record, sync_records

        runtime = self._runtime
        warned = capture.captured if capture is not None else []
        try:
            found = profiler.sync_events()
        except Exception as e:  # torch 2.13's CPU profiler once gave an event name that is not UTF-8: the
            # warnings' records (exact lines, no wait) and JAX's are still written
            runtime.faults.log_once("sync-events", f"the profiler's sync calls could not be read ({type(e).__name__})")
            found = []
        for line in sync_records(runtime.rank, warned, found, self._step_at):
            runtime.events.append_line(line)
        for t_ns, step, stack, op, dur_ns in jax_capture.captured if jax_capture is not None else []:
            runtime.events.append_line(sync_record(runtime.rank, step, stack, t_ns, op=op, dur_ns=dur_ns))

    def _step_at(self, t_ns: int) -> int:
        step = self.steps[0][0] if self.steps else (self._runtime.steps.current_step or 0)
        for s, start_ns in self.steps:
            if start_ns <= t_ns:
                step = s
        return step
