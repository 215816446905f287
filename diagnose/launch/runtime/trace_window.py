"""A profiler trace of a few steady-state steps: torch.profiler or jax.profiler.

The window is short on purpose: torch.profiler with Python stacks slows a step by
2-3x, so it covers ``GPUDIAG_TRACE_STEPS`` steps starting at ``GPUDIAG_TRACE_START``
and the rest of the run stays light. While it is open, sync warnings are captured
(sync_capture); after it closes, each captured sync is given its op and wait time
from the profiler's own events when the two lists line up one to one. ``StepWindow`` is
the runtime's part that opens and closes it; the classes below it drive each profiler.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import os
import re
import shutil
import sys
import time

from diagnose.launch.fault_reports import is_disk_full

SYNC_RUNTIME_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
_STACK_LINE = re.compile(r"^(.*)\((\d+)\): (.*)$")


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

    def open(self, step: int) -> None:
        runtime = self._runtime
        try:
            if runtime.framework == "torch":
                profiler = TorchTraceWindow(sys.modules["torch"], with_cuda=runtime.cuda)
            elif runtime.framework == "jax":
                profiler = JaxTraceWindow(
                    sys.modules["jax"], os.path.join(runtime.config.run_dir, "trace", f"jax-rank{runtime.rank}")
                )
            else:
                return
            runtime.expect(runtime.artifact("trace"))
            profiler.start()
        except Exception as e:
            runtime.faults.log_once("trace", f"no profiler trace ({type(e).__name__}: {e})")
            return
        self.profiler = profiler
        self.steps = []
        if runtime.config.sync_debug:
            from diagnose.launch.runtime.sync_capture import SyncWarningCapture

            capture = SyncWarningCapture(lambda: runtime.steps.current_step)
            capture.start(sys.modules.get("torch") if runtime.cuda else None)
            self._sync = capture

    def close(self) -> None:
        """Stop, write the trace, then the sync records; a failed write is reported, never raised."""
        runtime = self._runtime
        profiler, self.profiler = self.profiler, None
        capture, self._sync = self._sync, None
        if capture is not None:
            capture.stop()
        relative = runtime.artifact("trace")
        try:
            profiler.stop_and_export(runtime.in_run_dir(relative))
            runtime.written.add(relative)
        except Exception as e:
            runtime.faults.artifact_failed(relative, "profiler trace", e)
            return
        try:
            self._write_sync_records(profiler, capture)
        except Exception as e:
            if is_disk_full(e):
                runtime.faults.disk_full(e)
            else:
                runtime.faults.log_once("sync-records", f"sync records not written ({type(e).__name__}: {e})")

    def close_quietly(self) -> None:
        """Stop the capture and the profiler, exporting the trace when it can (the runtime is switching off)."""
        if self._sync is not None:
            try:
                self._sync.stop()
            except Exception:
                pass
            self._sync = None
        if self.profiler is not None:
            try:
                self.profiler.stop_and_export(self._runtime.in_run_dir(self._runtime.artifact("trace")))
            except Exception:
                pass
            self.profiler = None

    def stop_without_export(self) -> None:
        """Stop the profiler and the sync capture, writing nothing (the disk is full)."""
        profiler, self.profiler = self.profiler, None
        capture, self._sync = self._sync, None
        stops = [getattr(capture, "stop", None), getattr(profiler, "stop", None)]
        for stop in stops:
            if stop is not None:
                try:
                    stop()
                except Exception:
                    pass

    def _write_sync_records(self, profiler, capture) -> None:
        from diagnose.launch.runtime.sync_capture import sync_records

        runtime = self._runtime
        warned = capture.captured if capture is not None else []
        for record in sync_records(runtime.rank, warned, profiler.sync_events(), self._step_at):
            runtime.events.append(record)

    def _step_at(self, t_ns: int) -> int:
        step = self.steps[0][0] if self.steps else (self._runtime.steps.current_step or 0)
        for s, start_ns in self.steps:
            if start_ns <= t_ns:
                step = s
        return step


def _write_gzip_atomically(source_path: str, target_path: str) -> None:
    os.makedirs(os.path.dirname(target_path), exist_ok=True)
    tmp = f"{target_path}.{os.getpid()}.tmp"
    try:
        with open(source_path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _outermost_aten(event):
    op = None
    node = event
    while node is not None:
        if node.name.startswith("aten::"):
            op = node
        node = getattr(node, "cpu_parent", None)
    return op


def parse_profiler_stack(lines) -> list[tuple[str, int, str]]:
    """FunctionEvent.stack ("file.py(19): main", innermost first) → user frames from the innermost user one."""
    from diagnose.launch.runtime.sync_capture import MAX_STACK_FRAMES, is_user_file

    frames = []
    for text in lines or []:
        m = _STACK_LINE.match(text.strip())
        if m:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
    for i, (filename, _, _) in enumerate(frames):
        if is_user_file(filename):
            return [(os.path.abspath(f), n, fn) for f, n, fn in frames[i : i + MAX_STACK_FRAMES]]
    return []


CUPTI_TEARDOWN_MIN_CUDA = (12, 6)


@contextlib.contextmanager
def _cupti_teardown_on_stop(torch):
    """Let Kineto detach CUPTI when the window closes, so steps after it run at full speed.

    Kineto leaves CUPTI attached after ``profiler.stop()`` unless ``TEARDOWN_CUPTI=1`` is set when
    it tears down (read at that moment); CUPTI's callbacks then slow every later launch
    (pytorch/pytorch#144455). A value the user set is left alone; with CUDA older than 12.6 torch
    itself keeps CUPTI attached (teardown there can hang with CUDA graphs), so we do too.
    """
    if "TEARDOWN_CUPTI" in os.environ or not _cuda_at_least(torch, CUPTI_TEARDOWN_MIN_CUDA):
        yield
        return
    os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TEARDOWN_CUPTI", None)


def _cuda_at_least(torch, version: tuple[int, int]) -> bool:
    text = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        return tuple(int(part) for part in str(text).split(".")[:2]) >= version
    except ValueError:
        return False


class TorchTraceWindow:
    def __init__(self, torch, with_cuda: bool):
        self._torch = torch
        activities = [torch.profiler.ProfilerActivity.CPU]
        if with_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities, with_stack=True, record_shapes=False, profile_memory=False
        )
        self.started_wall_ns = 0

    def start(self) -> None:
        self.started_wall_ns = time.time_ns()
        self._profiler.start()

    def stop(self) -> None:
        """Stop tracing and write nothing (the disk is full, or the run is ending badly)."""
        with _cupti_teardown_on_stop(self._torch):
            self._profiler.stop()

    def stop_and_export(self, target_path: str) -> None:
        self.stop()
        os.makedirs(os.path.dirname(target_path), exist_ok=True)
        tmp_json = f"{target_path}.{os.getpid()}.json.tmp"
        try:
            self._profiler.export_chrome_trace(tmp_json)
            _write_gzip_atomically(tmp_json, target_path)
        finally:
            # torch's exporter writes through its own "<path>.tmp" and leaves it behind when it fails
            for leftover in (tmp_json, tmp_json + ".tmp"):
                if os.path.exists(leftover):
                    os.unlink(leftover)

    def sync_events(self) -> list[dict]:
        """The profiler's synchronizing runtime calls, in time order: op, wait, stack, wall time."""
        out = []
        for event in self._profiler.events():
            if event.name not in SYNC_RUNTIME_CALLS:
                continue
            aten = _outermost_aten(event)
            stack_source = aten if aten is not None and getattr(aten, "stack", None) else event
            start_us = event.time_range.start
            out.append(
                {
                    "op": aten.name if aten is not None else event.name,
                    "dur_ns": int(round((event.time_range.end - start_us) * 1000)),
                    "t_ns": self.started_wall_ns + int(start_us * 1000),
                    "stack": parse_profiler_stack(getattr(stack_source, "stack", None)),
                }
            )
        out.sort(key=lambda e: e["t_ns"])
        return out


class JaxTraceWindow:
    """jax.profiler with a perfetto trace; the trace lands in trace/rank<N>.json.gz."""

    def __init__(self, jax, work_dir: str):
        self._jax = jax
        self._work_dir = work_dir
        self.started_wall_ns = 0

    def start(self) -> None:
        os.makedirs(self._work_dir, exist_ok=True)
        self.started_wall_ns = time.time_ns()
        self._jax.profiler.start_trace(self._work_dir, create_perfetto_trace=True)

    def stop(self) -> None:
        """Stop tracing; the trace stays in the work folder and is not copied into the run."""
        self._jax.profiler.stop_trace()

    def stop_and_export(self, target_path: str) -> None:
        self.stop()
        found = sorted(
            glob.glob(os.path.join(self._work_dir, "**", "*perfetto_trace.json.gz"), recursive=True),
            key=os.path.getmtime,
        )
        if not found:
            found = sorted(
                glob.glob(os.path.join(self._work_dir, "**", "*.trace.json.gz"), recursive=True), key=os.path.getmtime
            )
        if not found:
            raise RuntimeError(f"jax.profiler wrote no trace under {self._work_dir}")
        os.makedirs(os.path.dirname(target_path), exist_ok=True)
        tmp = f"{target_path}.{os.getpid()}.tmp"
        try:
            shutil.copyfile(found[-1], tmp)
            os.replace(tmp, target_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def sync_events(self) -> list[dict]:
        return []
