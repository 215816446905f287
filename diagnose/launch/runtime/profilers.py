"""The profilers a trace window drives: torch.profiler and jax.profiler, each stopped, exported to
trace/rank<N>.json.gz (gzipped, written whole or not at all) and asked for its synchronizing calls.

Imported only when a window opens (:mod:`trace_window`), so a run without one, and every step before
it, never pays for these imports.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import gzip
import os
import re
import shutil
import time

from diagnose.launch.runtime.user_profilers import OWN_MARK
from parsers.run_records import is_profiler_file

SYNC_RUNTIME_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
_STACK_LINE = re.compile(r"^(.*)\((\d+)\): (.*)$")


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


def profiler_internal(lines) -> bool:
    """True when a profiler stack ("file.py(19): main" lines) passes through torch's profiler itself: the sync is
    the profiler's own. Every CUDA run folder up to 2026-12-06 had one such record, the window's stop's
    torch.cuda.synchronize() under gpudiag's boundary, put at the user's line the boundary ran on (fixtures/runs/
    char_gpt_h100's trace shows its stack); without the trace, the sync analyzer reported it as the script's."""
    return any(is_profiler_file(text) for text in lines or ())


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
def _cupti_teardown_on_stop(torch, with_cuda: bool = True):
    """Let Kineto detach CUPTI when the window closes, so steps after it run at full speed.

    Kineto leaves CUPTI attached after ``profiler.stop()`` unless ``TEARDOWN_CUPTI=1`` is set when
    it tears down (read at that moment); CUPTI's callbacks then slow every later launch
    (pytorch/pytorch#144455). A value the user set is left alone; with CUDA older than 12.6 torch
    itself keeps CUPTI attached (teardown there can hang with CUDA graphs), so we do too.

    A window that traced no CUDA activity (a script that never used the GPU) attached no CUPTI, and the teardown
    must not run: on the lent GPU machine (torch 2.11+cu130) a CPU-only ``torch.profiler`` stopped with
    ``TEARDOWN_CUPTI=1`` left the process hung at exit, with or without gpudiag; stopped without it, it exits.
    """
    if not with_cuda or "TEARDOWN_CUPTI" in os.environ or not _cuda_at_least(torch, CUPTI_TEARDOWN_MIN_CUDA):
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
        self._with_cuda = with_cuda
        activities = [torch.profiler.ProfilerActivity.CPU]
        if with_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities, with_stack=True, record_shapes=False, profile_memory=False
        )
        setattr(self._profiler, OWN_MARK, True)  # not the script's profiler (user_profilers)
        self.started_wall_ns = 0

    def start(self) -> None:
        self.started_wall_ns = time.time_ns()
        self._profiler.start()

    def stop(self) -> None:
        """Stop tracing and write nothing (the disk is full, or the run is ending badly)."""
        with _cupti_teardown_on_stop(self._torch, self._with_cuda):
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

    def sync_events(self, names: tuple[str, ...] = SYNC_RUNTIME_CALLS) -> list[dict]:
        """The profiler's synchronizing runtime calls, in time order: op, wait, stack, wall time.

        Read from the profiler's raw (Kineto) events, not ``profile.events()``: that builds a Python object and a
        tree for every event, Python stacks' function events included, and took about 10 s after a three-step
        window of a small LSTM on the CPU host (101,325 Python function events). A window with no CUDA activity
        has no CUDA runtime calls to read. ``names``: the calls to find (tests pass CPU ops)."""
        if not self._with_cuda and names == SYNC_RUNTIME_CALLS:
            return []
        results = getattr(getattr(self._profiler, "profiler", None), "kineto_results", None)
        if results is None or not hasattr(results, "trace_start_ns"):  # a torch without raw events: the slow path
            return self._sync_events_from_function_events(names)
        return raw_sync_events(results.events(), results.trace_start_ns(), self.started_wall_ns, names)

    def _sync_events_from_function_events(self, names: tuple[str, ...]) -> list[dict]:
        out, events, last_runtime_us = [], self._profiler.events(), {}
        for event in events:
            if event.name.startswith("cuda"):  # as raw_sync_events: each thread's last CUDA runtime call
                start = event.time_range.start
                last_runtime_us[event.thread] = max(last_runtime_us.get(event.thread, start), start)
        for event in events:
            if event.name not in names:
                continue
            aten = _outermost_aten(event)
            if (
                aten is None
                and event.name == PROFILER_STOP_SYNC
                and event.time_range.start == last_runtime_us.get(event.thread)
            ):
                continue  # the window's stop (PROFILER_STOP_SYNC)
            stack_source = aten if aten is not None and getattr(aten, "stack", None) else event
            if profiler_internal(getattr(stack_source, "stack", None)):
                continue
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


# the profiler's stop synchronizes the device (torch/autograd/profiler.py's __exit__): in every CUDA trace in
# fixtures/runs (18, H100 and H200) it is the last CUDA runtime call of the window, its thread's last. Its Python
# stack is torch's profiler under gpudiag's boundary in the trace file, but Kineto's raw event gave the stack of the
# user's line before (examples/mlp_model.py:20 on an H100, 2026-12-06), so profiler_internal did not catch it there.
PROFILER_STOP_SYNC = "cudaDeviceSynchronize"


def raw_sync_events(events, trace_start_ns: int, started_wall_ns: int, names: tuple[str, ...]) -> list[dict]:
    """``sync_events`` from Kineto's raw events: each call named in ``names`` with the outermost ``aten::`` op on
    its thread whose span holds it (the op the user's code called: ``aten::item`` around the
    ``cudaStreamSynchronize``), that op's Python stack, the call's own duration, and its wall time (the profiler's
    start plus its offset into the trace, as ``profile.events()`` reads it). The profiler's own stop is left out
    (``PROFILER_STOP_SYNC``)."""
    calls, aten_by_thread, last_runtime_ns = [], {}, {}
    for event in events:
        name = event.name()
        if name in names:
            calls.append(event)
        if name.startswith("aten::") and event.start_thread_id() == event.end_thread_id():  # as torch's tree
            aten_by_thread.setdefault(event.start_thread_id(), []).append(event)
        if name.startswith("cuda"):
            thread = event.start_thread_id()
            last_runtime_ns[thread] = max(last_runtime_ns.get(thread, event.start_ns()), event.start_ns())
    outermost = {thread: _outermost_spans(ops) for thread, ops in aten_by_thread.items()}
    out = []
    for call in calls:
        start_ns, end_ns = call.start_ns(), call.end_ns()
        aten = _holding(outermost.get(call.start_thread_id()), start_ns, end_ns)
        if (
            aten is None
            and call.name() == PROFILER_STOP_SYNC
            and start_ns == last_runtime_ns.get(call.start_thread_id())
        ):
            continue  # the window's stop: torch.cuda.synchronize() in the profiler's __exit__, the thread's last call
        stack_source = aten if aten is not None and aten.stack() else call
        if profiler_internal(stack_source.stack()):
            continue
        out.append(
            {
                "op": aten.name() if aten is not None else call.name(),
                "dur_ns": int(end_ns - start_ns),
                "t_ns": started_wall_ns + int(start_ns - trace_start_ns),
                "stack": parse_profiler_stack(stack_source.stack()),
            }
        )
    out.sort(key=lambda e: e["t_ns"])
    return out


def _outermost_spans(ops: list) -> tuple[list[int], list]:
    """The ops no other op of the list holds, by start: (their starts, the ops). They are disjoint, so the one that
    holds a time is found by bisection."""
    ordered = sorted(ops, key=lambda e: (e.start_ns(), -e.end_ns()))
    starts, tops, end_ns = [], [], None
    for op in ordered:
        if end_ns is None or op.start_ns() >= end_ns:
            starts.append(op.start_ns())
            tops.append(op)
            end_ns = op.end_ns()
        elif op.end_ns() > end_ns:  # overlaps the last one without being inside it (a clock's rounding): its own
            starts.append(op.start_ns())
            tops.append(op)
            end_ns = op.end_ns()
    return starts, tops


def _holding(spans: tuple[list[int], list] | None, start_ns: int, end_ns: int):
    """The outermost op whose span holds [start_ns, end_ns], or None."""
    if not spans:
        return None
    starts, tops = spans
    i = bisect.bisect_right(starts, start_ns) - 1
    if i >= 0 and tops[i].start_ns() <= start_ns and end_ns <= tops[i].end_ns():
        return tops[i]
    return None


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
