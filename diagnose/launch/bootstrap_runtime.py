"""The in-child runtime: what gpudiag does inside the user's training process.

Step boundaries come from torch's global optimizer step hook (the first optimizer that
steps defines the step) or from ``diagnose.step()``; once a marker is seen it alone
defines steps. Step N is the work between boundary N and boundary N+1. Per step: host
time, CUDA-event GPU time (read lazily with ``event.query()``, never a sync; on every
k-th step only when an event costs more than GPU_TIME_BUDGET_PCT of a step), an NVTX
range (when an NVTX tool can receive it; always under ncu), and now and then allocator
stats. A short profiler window, the allocator history and sync capture are the only
heavier parts, at the window's edges.

Rules kept here: standard library only until the user imports torch or jax; nothing
touches CUDA before the user does (torch's lazy-init queue); no RNG, no extra syncs; any
internal error logs one line and switches the runtime off. Files are written lazily, so
a process that never steps (torchrun's launcher, a DataLoader worker) writes nothing.
"""
from __future__ import annotations

import collections
import importlib
import importlib.util
import math
import os
import sys
import threading
import time

_LAUNCH_DIR = os.path.dirname(os.path.abspath(__file__))


def _load(name: str):
    """A sibling module, without importing the heavy ``diagnose`` package (pandas) into the child."""
    full = f"diagnose.launch.{name}"
    module = sys.modules.get(full)
    if module is not None:
        return module
    if getattr(sys.modules.get("diagnose.launch"), "__path__", None):
        return importlib.import_module(full)
    spec = importlib.util.spec_from_file_location(full, os.path.join(_LAUNCH_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    return module


child_config = _load("child_config")
fault_injection = _load("fault_injection")  # before event_log and memory_capture, which import it
fault_reports = _load("fault_reports")
event_log = _load("event_log")

_RUNTIME = None  # the active Runtime, if any
# Step records are written at most this often (and before anything heavy, and at every exit through
# Python): one write of many lines instead of one per step. Per-step writing cost 5 % of a 2.2 ms step
# on the H200 host (2026-12-03, benchmarks/light_overhead_paired.py); a SIGKILL or a crash in native
# code loses at most this much of the step log.
STEP_RECORD_INTERVAL_NS = 100_000_000
# GPU time costs a CUDA event record per timed step: 45-68 µs a call inside a training loop on the H200 host
# (2026-12-03, tools/boundary_breakdown.py), 2-3 % of a 2.3 ms step. With --gpu-time-every 0 (auto, the default) the steps are timed on the GPU one in k,
# k chosen so the events cost at most this share of a step's host time; every step when they cost less.
GPU_TIME_BUDGET_PCT = 0.5
GPU_TIME_FIRST_CHECK_STEP = 8  # the first choice of k, from the steps before (step 0 and window steps excluded)
GPU_TIME_MIN_STEPS = 6  # uninstrumented steps needed for a choice; until then every step is timed
GPU_TIME_CHECK_EVERY_STEPS = 64  # k is chosen again this often, from the latest steps
GPU_TIME_MAX_EVERY = 256


def log(message: str) -> None:
    try:
        sys.stderr.write(f"gpudiag: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


class Runtime:
    def __init__(self, config):
        self.config = config
        self.disabled = False
        self._writes_off = False  # a full disk: nothing more is written by this process
        self.faults: list[dict] = []  # what could not be written and why (also sent to the parent)
        self._logged = set()
        self._lock = threading.RLock()
        self.pid = os.getpid()
        self.rank = None
        self.world_size = None
        self.current_step = None  # the step in progress; None before the first boundary
        self.steps_recorded = 0
        self._marker_seen = False
        self._step_optimizer_id = None
        self._step_source = None
        self._step_perf_ns = 0
        self._step_wall_ns = 0
        self._step_event = None
        self._step_instrumented = False
        self._step_overhead_ns = 0  # host time of the boundary that started the current step (our own cost)
        self._gpu_every = max(1, config.gpu_time_every)  # GPU time on steps with step % k == 0
        self._gpu_auto = config.gpu_time_every == 0
        self._gpu_next_check = GPU_TIME_FIRST_CHECK_STEP
        self._event_ns = collections.deque(maxlen=16)  # host ns of the latest CUDA event records
        self._host_ns = collections.deque(maxlen=32)  # host ns of the latest uninstrumented steps
        # finished steps not yet written: (step, t_start_ns, host_ms, start_event, end_event, source, instrumented,
        # overhead_ns), plain tuples (a class instance per step cost more on the H200 host)
        self._pending = collections.deque()
        self._window_start = (config.trace_start if config.trace_steps > 0 and config.mode != "ncu" else None)
        self._stats_interval_ns = config.memory_stats_interval_ms * 1e6
        self._last_drain_perf_ns = 0
        self._events = None
        self._stats = None
        self._last_stats_perf_ns = None
        self._nvtx = None
        self._nvtx_handle = None
        self._window = None
        self._window_steps = []  # (step, t_start_ns) inside the window
        self._sync = None
        self._history_on = False
        self._snapshot_written = False
        self._expected = set()
        self._written = set()
        self._framework = None
        self._cuda = False
        self._torch_hooked = False
        self._optimizer_hook_handle = None

    # ---- paths
    def _path(self, kind: str) -> str:
        rank = self.rank
        relative = {"events": f"events/rank{rank}.jsonl", "stats": f"memory/rank{rank}.stats.jsonl",
                    "snapshot": f"memory/rank{rank}.snapshot.json.gz", "trace": f"trace/rank{rank}.json.gz"}[kind]
        return relative

    def _abs(self, relative: str) -> str:
        return os.path.join(self.config.run_dir, relative)

    # ---- safety
    def log_once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log(message)

    def _fail(self, where: str, error: BaseException) -> None:
        if fault_reports.is_disk_full(error):
            self._disk_full(error)
            return
        self.log_once("internal-error", f"internal error in the bootstrap ({where}: {type(error).__name__}: {error}); "
                                        "instrumentation is off for the rest of this run, training goes on")
        self.disabled = True
        self._close_window_quietly()
        self._stop_history_quietly()

    def _stop_history_quietly(self) -> None:
        if self._history_on:
            try:
                _load("memory_capture").stop_allocator_history(sys.modules["torch"])
            except Exception:
                pass
            self._history_on = False

    def _report_fault(self, kind: str, artifact: str | None, error: str) -> None:
        fault = {"kind": kind, "rank": self.rank, "pid": self.pid, "artifact": artifact, "error": error,
                 "step": self.current_step, "t_ns": time.time_ns()}
        self.faults.append(fault)
        fault_reports.send(fault)

    def _relative(self, path) -> str | None:
        if not path:
            return None
        try:
            return os.path.relpath(os.fspath(path), self.config.run_dir).replace(os.sep, "/")
        except (TypeError, ValueError):
            return str(path)

    def _disk_full(self, error: OSError) -> None:
        """A full disk (or a file-size limit): say it once, write nothing more, let the training go on."""
        if self._writes_off:
            return
        self._writes_off = True
        self.disabled = True
        artifact = self._relative(error.filename)
        reason = fault_reports.describe_error(error)
        at = f" at step {self.current_step}" if self.current_step is not None else ""
        self.log_once("disk-full", f"{reason} writing {artifact or 'the run folder'}{at}; gpudiag writes nothing "
                                   f"more in this process (rank {self.rank}), training goes on")
        self._report_fault("disk-full", artifact, reason)
        self._stop_window_without_export()
        self._stop_history_quietly()
        for f in (self._events, self._stats):
            if f is not None:
                f.close()

    def _artifact_failed(self, relative: str, what: str, error: BaseException) -> None:
        """A whole-file artifact (trace, snapshot) was not written: a full disk stops all writing, else log once."""
        if fault_reports.is_disk_full(error):
            error.filename = error.filename or self._abs(relative)
            self._disk_full(error)
            return
        probe = fault_reports.disk_probe(self.config.run_dir)
        reason = (f"{what} not written, probably disk full: {probe} (the export said {type(error).__name__}: "
                  f"{error})" if probe else f"{what} not written ({type(error).__name__}: {error})")
        self.log_once(relative, reason)
        self._report_fault("write-failed", relative, reason)

    # ---- torch integration
    def on_torch_imported(self, torch) -> None:
        if self._torch_hooked or self.disabled:
            return
        self._torch_hooked = True
        try:
            optimizer_module = importlib.import_module("torch.optim.optimizer")
            self._optimizer_hook_handle = optimizer_module.register_optimizer_step_post_hook(self._optimizer_hook)
        except Exception as e:
            self.log_once("no-optimizer-hook", f"cannot hook torch optimizers ({e}); mark steps with diagnose.step()")
        if self.config.mode in ("light", "in-process") and self.config.history_max_entries > 0:
            try:
                torch.cuda._lazy_call(self._start_history_safely)
            except Exception:
                pass

    def _start_history_safely(self) -> None:
        # runs inside torch's CUDA lazy init: it must never raise
        try:
            if self.disabled or self.pid != os.getpid():
                return
            torch = sys.modules["torch"]
            _load("memory_capture").start_allocator_history(torch, self.config.history_max_entries)
            self._history_on = True
        except Exception as e:
            self.log_once("history", f"allocator history not recorded ({type(e).__name__}: {e})")

    def _optimizer_hook(self, optimizer, args, kwargs) -> None:
        if self.disabled or self._marker_seen:
            return
        if self._step_optimizer_id is None:
            self._step_optimizer_id = id(optimizer)
        elif id(optimizer) != self._step_optimizer_id:
            return
        self.boundary("optimizer")

    def marker(self) -> None:
        if self.disabled:
            return
        if not self._marker_seen:
            self._marker_seen = True
            if self._step_source == "optimizer":
                # this iteration already ended at optimizer.step(); the marker takes over from the next one
                self._step_source = "marker"
                return
        self.boundary("marker")

    # ---- the boundary
    def boundary(self, source: str) -> None:
        if self.disabled:  # a forked child is switched off by _disable_in_fork_child (os.register_at_fork)
            return
        if not self._lock.acquire(blocking=False):
            return  # re-entered from a signal handler in the middle of a boundary
        started_ns = time.perf_counter_ns()
        try:
            self._boundary(source)
        except Exception as e:
            self._fail("step boundary", e)
        finally:
            # the boundary runs inside the step it starts, so its time is in that step's host_ms;
            # recording it per step lets the report say how much of a step is gpudiag's own work
            self._step_overhead_ns = time.perf_counter_ns() - started_ns
            self._lock.release()

    def _boundary(self, source: str) -> None:
        perf_ns = time.perf_counter_ns()
        wall_ns = time.time_ns()
        if self.current_step is None:
            if not self._first_boundary():
                return
        finished = self.current_step
        step = 0 if finished is None else finished + 1
        event = None
        if self._cuda and (self._step_event is not None or step % self._gpu_every == 0):
            event = self._record_event()
        if finished is not None:
            if self._nvtx is not None and self._nvtx_handle is not None:
                self._nvtx.end(self._nvtx_handle)
                self._nvtx_handle = None
            host_ns = perf_ns - self._step_perf_ns
            if finished > 0 and not self._step_instrumented:
                self._host_ns.append(host_ns)
            self._pending.append((finished, self._step_wall_ns, host_ns / 1e6, self._step_event,
                                  event if self._step_event is not None else None, self._step_source,
                                  self._step_instrumented, self._step_overhead_ns))
            # only the window's close and the snapshot are heavy; most steps have neither left to do
            heavy = (self._window is not None or (self._history_on and not self._snapshot_written)) and \
                self._after_step(finished)
        else:
            heavy = False
        self.current_step = step
        self._step_source = source
        self._step_instrumented = heavy  # the window's export or the snapshot ran at the start of this step
        if step == self._window_start:
            self._open_window(step)
        if self._window is not None:
            self._window_steps.append((step, wall_ns))
            self._step_instrumented = True
        if heavy or perf_ns - self._last_drain_perf_ns >= STEP_RECORD_INTERVAL_NS:
            self._last_drain_perf_ns = perf_ns
            self._drain(block_s=0.0)
        self._maybe_memory_stats(step, perf_ns)
        if self._gpu_auto and self._cuda and step >= self._gpu_next_check:
            self._choose_gpu_every(step)
        if self._nvtx is not None:
            self._nvtx_handle = self._nvtx.start(child_config.nvtx_range_name(step))
        self._step_perf_ns = perf_ns
        self._step_wall_ns = wall_ns
        self._step_event = event if step % self._gpu_every == 0 else None

    def _record_event(self):
        """A timing CUDA event recorded on the current stream, or None while the stream is being captured
        into a CUDA graph (recording a timing event there is an error). Its host cost is kept for k."""
        torch = sys.modules["torch"]
        started_ns = time.perf_counter_ns()
        if torch.cuda.is_current_stream_capturing():
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._event_ns.append(time.perf_counter_ns() - started_ns)
        return event

    def _choose_gpu_every(self, step: int) -> None:
        every = gpu_time_every(self._event_ns, self._host_ns, self._gpu_every)
        self._gpu_next_check = step + (1 if every is None else GPU_TIME_CHECK_EVERY_STEPS)
        if every is None or every == self._gpu_every:
            return
        event_ns, host_ns = _median(self._event_ns), _median(self._host_ns)
        self._gpu_every = every
        self._events.append({"kind": "run", "event": "gpu-time-every", "rank": self.rank, "from_step": step + 1,
                             "every": self._gpu_every, "event_us": round(event_ns / 1e3, 3),
                             "step_host_ms": round(host_ns / 1e6, 6), "budget_pct": GPU_TIME_BUDGET_PCT,
                             "t_ns": time.time_ns()})

    def _first_boundary(self) -> bool:
        """Everything that waits for the first step: rank, framework, files, exit hooks."""
        torch = sys.modules.get("torch")
        jax = sys.modules.get("jax")
        self.rank = child_config.rank_from_env()
        self.world_size = child_config.world_size_from_env()
        if torch is not None:
            self._framework = "torch"
            self._cuda = bool(torch.cuda.is_initialized())
            if self.rank is None:
                try:
                    if torch.distributed.is_available() and torch.distributed.is_initialized():
                        self.rank = torch.distributed.get_rank()
                        self.world_size = torch.distributed.get_world_size()
                except Exception:
                    pass
        if jax is not None and (torch is None or not self._cuda):
            self._framework = "jax"
            self._cuda = False
            try:
                if self.rank is None and jax.process_count() > 1:
                    self.rank = jax.process_index()
                    self.world_size = jax.process_count()
            except Exception:
                pass
        self.rank = 0 if self.rank is None else self.rank
        self._events = event_log.JsonlAppender(self._abs(self._path("events")))
        try:
            self._events.append({"kind": "run", "event": "start", "rank": self.rank, "world_size": self.world_size,
                                 "pid": self.pid, "framework": self._framework, "mode": self.config.mode,
                                 "cuda": self._cuda, "versions": _framework_versions(torch, jax),
                                 "t_ns": time.time_ns()})
        except FileExistsError:
            self.log_once("rank-taken", f"another process already records rank {self.rank} in this run folder; "
                                        f"this process (pid {self.pid}) records nothing")
            self.disabled = True
            return False
        self._expect(self._path("events"))
        self._written.add(self._path("events"))
        gpu = self._cuda or self._jax_on_gpu(jax)
        if not gpu:
            self.log_once("no-gpu", f"no GPU in use in this process (rank {self.rank}, {self._framework or 'no framework'}); "
                                    "recording host step times only: no GPU time, memory stats or allocator history")
        else:
            self._stats = event_log.JsonlAppender(self._abs(self._path("stats")))
            self._expect(self._path("stats"))
        if self._history_on:
            self._expect(self._path("snapshot"))
        if self.config.nvtx and gpu:
            self._start_nvtx()
        _load("exit_hooks").install(lambda: self.flush("exit"))
        return True

    def _start_nvtx(self) -> None:
        """Open an NVTX backend when a tool can receive the ranges (always under ncu), and say which way it went."""
        nvtx_ranges = _load("nvtx_ranges")
        ncu = self.config.mode == "ncu"
        listening = ncu or self.config.nvtx_always or nvtx_ranges.tool_may_listen()
        if listening:
            self._nvtx = nvtx_ranges.open_backend(allow_torch_import=ncu)
            if self._nvtx is None and ncu:
                self.log_once("no-nvtx", "no NVTX library found (torch CUDA, the nvtx package or libnvToolsExt); "
                                         "steps carry no NVTX ranges, so ncu's step window cannot match: "
                                         "use --launch-skip/--launch-count")
        why = ("no NVTX tool in the environment (" + ", ".join(nvtx_ranges.TOOL_ENV) + " unset)" if not listening
               else "no NVTX library found" if self._nvtx is None else None)
        self._events.append({"kind": "run", "event": "nvtx", "rank": self.rank, "ranges": self._nvtx is not None,
                             "backend": getattr(self._nvtx, "name", None), "why_not": why, "t_ns": time.time_ns()})

    @staticmethod
    def _jax_on_gpu(jax) -> bool:
        if jax is None:
            return False
        try:
            return any(d.platform == "gpu" for d in jax.local_devices())
        except Exception:
            return False

    def _expect(self, relative: str) -> None:
        if relative not in self._expected:
            self._expected.add(relative)
            if self._events is not None and self._events.opened:
                self._events.append({"kind": "run", "event": "expect", "rank": self.rank, "artifact": relative,
                                     "t_ns": time.time_ns()})

    def _after_step(self, finished: int) -> bool:
        """Close the window / write the snapshot after step ``finished``; True when anything heavy ran.

        The step records held so far are written first: a kill during the export loses none of them."""
        heavy = False
        if self._window is not None and finished == self.config.trace_stop - 1:
            self._drain(block_s=0.0)
            self._close_window()
            heavy = True
        snapshot_step = self.config.snapshot_step
        if self._history_on and not self._snapshot_written and snapshot_step is not None and finished >= snapshot_step:
            self._drain(block_s=0.0)
            self._write_snapshot()
            heavy = True
        return heavy

    # ---- per-step records
    def _drain(self, block_s: float) -> None:
        """Write the held step records whose GPU time is known (all of them after ``block_s`` at most), in one write."""
        deadline = time.monotonic() + block_s if block_s else None
        lines = []
        pending_steps, step_line, rank = self._pending, event_log.step_line, self.rank
        try:
            while pending_steps:
                step, t_start_ns, host_ms, start_event, end_event, source, instrumented, overhead_ns = pending_steps[0]
                gpu_ms = None
                if end_event is not None and start_event is not None:
                    while not end_event.query():
                        if deadline is None:
                            return  # not done yet: read it at a later boundary
                        if time.monotonic() >= deadline:
                            break  # at exit and still running: write the step without GPU time
                        time.sleep(0.005)
                    else:
                        gpu_ms = start_event.elapsed_time(end_event)
                pending_steps.popleft()
                lines.append(step_line(rank, step, t_start_ns, host_ms, gpu_ms, source, instrumented, overhead_ns / 1e3))
        finally:
            if lines:
                self._events.append_lines(lines)
                self.steps_recorded += len(lines)

    def _maybe_memory_stats(self, step: int, perf_ns: int) -> None:
        if self._stats is None:
            return
        if self._last_stats_perf_ns is not None and perf_ns - self._last_stats_perf_ns < self._stats_interval_ns:
            return
        self._last_stats_perf_ns = perf_ns
        memory = _load("memory_capture")
        if self._framework == "torch":
            record = memory.torch_memory_stats_record(sys.modules["torch"], self.rank, step)
        else:
            record = memory.jax_memory_stats_record(sys.modules["jax"], self.rank, step)
        if record is not None:
            self._stats.append(record)
            self._written.add(self._path("stats"))

    # ---- the trace window
    def _open_window(self, step: int) -> None:
        windows = _load("trace_window")
        try:
            if self._framework == "torch":
                window = windows.TorchTraceWindow(sys.modules["torch"], with_cuda=self._cuda)
            elif self._framework == "jax":
                window = windows.JaxTraceWindow(sys.modules["jax"], os.path.join(self.config.run_dir, "trace",
                                                                                 f"jax-rank{self.rank}"))
            else:
                return
            self._expect(self._path("trace"))
            window.start()
        except Exception as e:
            self.log_once("trace", f"no profiler trace ({type(e).__name__}: {e})")
            return
        self._window = window
        self._window_steps = []
        if self.config.sync_debug:
            capture = _load("sync_capture").SyncWarningCapture(lambda: self.current_step)
            capture.start(sys.modules.get("torch") if self._cuda else None)
            self._sync = capture

    def _close_window(self) -> None:
        window, self._window = self._window, None
        capture, self._sync = self._sync, None
        if capture is not None:
            capture.stop()
        try:
            window.stop_and_export(self._abs(self._path("trace")))
            self._written.add(self._path("trace"))
        except Exception as e:
            self._artifact_failed(self._path("trace"), "profiler trace", e)
            return
        try:
            self._write_sync_records(window, capture)
        except Exception as e:
            if fault_reports.is_disk_full(e):
                self._disk_full(e)
            else:
                self.log_once("sync-records", f"sync records not written ({type(e).__name__}: {e})")

    def _close_window_quietly(self) -> None:
        if self._sync is not None:
            try:
                self._sync.stop()
            except Exception:
                pass
            self._sync = None
        if self._window is not None:
            try:
                self._window.stop_and_export(self._abs(self._path("trace")))
            except Exception:
                pass
            self._window = None

    def _stop_window_without_export(self) -> None:
        """Stop the profiler and the sync capture, writing nothing (the disk is full)."""
        window, self._window = self._window, None
        capture, self._sync = self._sync, None
        stops = [getattr(capture, "stop", None), getattr(window, "stop", None)]
        for stop in stops:
            if stop is not None:
                try:
                    stop()
                except Exception:
                    pass

    def _write_sync_records(self, window, capture) -> None:
        sync_capture = _load("sync_capture")
        profiler_syncs = window.sync_events()
        warned = capture.captured if capture is not None else []
        if warned:
            paired = len(profiler_syncs) == len(warned)
            for i, (t_ns, step, stack) in enumerate(warned):
                found = profiler_syncs[i] if paired else None
                self._events.append(sync_capture.sync_record(
                    self.rank, step, stack or (found["stack"] if found else []), t_ns,
                    op=found["op"] if found else "cuda_sync", dur_ns=found["dur_ns"] if found else None))
        else:
            for found in profiler_syncs:
                self._events.append(sync_capture.sync_record(self.rank, self._step_at(found["t_ns"]), found["stack"],
                                                             found["t_ns"], op=found["op"], dur_ns=found["dur_ns"]))

    def _step_at(self, t_ns: int) -> int:
        step = self._window_steps[0][0] if self._window_steps else (self.current_step or 0)
        for s, start_ns in self._window_steps:
            if start_ns <= t_ns:
                step = s
        return step

    # ---- allocator history
    def _write_snapshot(self) -> None:
        torch = sys.modules["torch"]
        memory = _load("memory_capture")
        self._snapshot_written = True
        try:
            memory.write_snapshot(torch, self._abs(self._path("snapshot")))
            self._written.add(self._path("snapshot"))
        except Exception as e:
            self._artifact_failed(self._path("snapshot"), "allocator snapshot", e)
        try:
            memory.stop_allocator_history(torch)
        except Exception:
            pass
        self._history_on = False

    # ---- the end
    def flush(self, reason: str) -> None:
        """Write everything still held: pending steps, an open window, the snapshot, the end record."""
        if (self.disabled and self._events is None) or self._writes_off:
            return
        with self._lock:
            try:
                if self._events is None or not self._events.opened:
                    return
                self._drain(block_s=0.0)  # what is ready, before the heavy writes below
                if self._window is not None:
                    self._close_window()
                if self._history_on and not self._snapshot_written:
                    self._write_snapshot()
                self._drain(block_s=2.0 if reason == "exit" else 0.0)
                self._events.append({"kind": "run", "event": "end", "rank": self.rank, "reason": reason,
                                     "steps": self.steps_recorded, "written": sorted(self._written),
                                     "t_ns": time.time_ns()})
            except Exception as e:
                self._fail("flush", e)
            finally:
                for f in (self._events, self._stats):
                    if f is not None:
                        f.close()
                self.disabled = True


def gpu_time_every(event_ns, host_ns, current: int) -> int | None:
    """Time one step in k on the GPU: the smallest k that keeps the events within GPU_TIME_BUDGET_PCT of a step.

    ``event_ns``: host ns of recent event records; ``host_ns``: host ns of recent steps. A timed step among
    untimed ones needs two events (its start and its end); with k = 1 one event ends a step and starts the
    next. ``current`` is kept until the choice moves by a factor of 1.5, so k does not flap. None: too few
    samples to choose yet."""
    if not event_ns or len(host_ns) < GPU_TIME_MIN_STEPS:
        return None
    event, host = _median(event_ns), _median(host_ns)
    budget = GPU_TIME_BUDGET_PCT / 100.0 * host
    if event <= budget:
        every = 1
    else:
        every = min(GPU_TIME_MAX_EVERY, max(2, math.ceil(2 * event / max(budget, 1.0))))
    if every != 1 and current != 1 and current / 1.5 < every < current * 1.5:
        return current
    return every


def _median(values) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _framework_versions(torch, jax) -> dict:
    versions = {}
    try:
        if torch is not None:
            versions["torch"] = str(torch.__version__)
            versions["torch_cuda"] = torch.version.cuda
        if jax is not None:
            versions["jax"] = str(jax.__version__)
    except Exception:
        pass
    return versions


class _PostImportHook:
    """Calls ``callback(module)`` right after ``name`` is first imported (a meta path finder)."""

    def __init__(self, name: str, callback):
        self.name, self.callback, self._busy = name, callback, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _CallbackLoader:
    def __init__(self, loader, hook):
        self._loader, self._hook = loader, hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._hook.remove()
        try:
            self._hook.callback(module)
        except Exception as e:
            log(f"internal error hooking {self._hook.name} ({type(e).__name__}: {e}); instrumentation is off")

    def __getattr__(self, name):
        return getattr(self._loader, name)


def install(config) -> Runtime | None:
    """Start the runtime in this process with ``config`` (a child_config.ChildConfig)."""
    global _RUNTIME
    if _RUNTIME is not None and not _RUNTIME.disabled:
        return _RUNTIME
    runtime = Runtime(config)
    _RUNTIME = runtime
    torch = sys.modules.get("torch")
    if torch is not None:
        runtime.on_torch_imported(torch)
    else:
        sys.meta_path.insert(0, _PostImportHook("torch", runtime.on_torch_imported))
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_disable_in_fork_child)
    return runtime


def _disable_in_fork_child() -> None:
    runtime = _RUNTIME
    if runtime is not None and runtime.pid != os.getpid():
        runtime.disabled = True


def install_from_env() -> Runtime | None:
    """What the sitecustomize calls: start when the parent set GPUDIAG_RUN_DIR, else do nothing."""
    try:
        config = child_config.from_env()
        if config is None:
            return None
        return install(config)
    except Exception as e:
        log(f"bootstrap not started ({type(e).__name__}: {e}); the script runs without instrumentation")
        return None


def uninstall() -> list[dict]:
    """Flush and stop (the in-process context manager's end); returns the faults the runtime met."""
    global _RUNTIME
    runtime, _RUNTIME = _RUNTIME, None
    if runtime is None:
        return []
    for hook in [h for h in sys.meta_path if isinstance(h, _PostImportHook)]:
        hook.remove()
    runtime.flush("context-exit")
    if runtime._optimizer_hook_handle is not None:
        runtime._optimizer_hook_handle.remove()
    return list(runtime.faults)


def active() -> Runtime | None:
    return _RUNTIME


def step() -> None:
    """``diagnose.step()``: mark a step boundary. A no-op when not under gpudiag."""
    runtime = _RUNTIME
    if runtime is not None:
        try:
            runtime.marker()
        except Exception as e:
            runtime._fail("diagnose.step", e)
