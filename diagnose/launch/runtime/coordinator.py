"""Runtime: the one object that wires the runtime's parts and holds what they share.

Shared: the configuration, this process's rank and framework, whether CUDA is in use, the
``disabled`` switch and the lock the step boundary takes, the events file, and which
artifacts were announced and written. The parts (steps.Steps, gpu_time.GpuTime,
nvtx_ranges, trace_window.StepWindow, memory_capture.MemoryCapture, faults.Faults) keep
their own state and reach the shared state through the Runtime they are given.

Everything waits for the first step boundary (``start``): a process that never steps
(torchrun's launcher, a DataLoader worker) writes nothing. Work recorded before it (imports, a
compile, a checkpoint, an evaluation, a DataLoader's configuration; step -1) is held in memory,
at most MAX_HELD_RECORDS records, and written in time order right after the run's start record.
The per-step path is steps.Steps, which calls the parts it was wired to directly; the Runtime is
not on it.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from diagnose.launch.child_config import rank_from_env, world_size_from_env
from diagnose.launch.event_log import JsonlAppender
from diagnose.launch.runtime.cpu_wait import cpus_allowed, main_thread_ms, thread_count
from diagnose.launch.runtime.faults import Faults
from diagnose.launch.runtime.steps import Steps
from parsers.run_records import (
    EVENTS,
    RUN_END,
    RUN_EXPECT,
    RUN_START,
    RUN_STOP_SIGNAL,
    SNAPSHOT,
    RankFile,
    format_record,
)

MAX_HELD_RECORDS = 10_000  # records held before the first step boundary; later ones are dropped


class Runtime:
    """gpudiag inside one process: its parts, what they share, its start (first step) and its end (flush)."""

    def __init__(self, config):
        self.install_ns = time.time_ns()  # the runtime's start: just after the interpreter's and the sitecustomize
        self.config = config
        self.disabled = False
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.rank = None
        self.world_size = None
        self.framework = None
        self.cuda = False
        self.events = None  # events/rank<N>.jsonl, opened at the first boundary
        self.expected = set()
        self.written = set()
        self.faults = Faults(self)
        self.steps = Steps(self)
        self.memory = None  # memory_capture.MemoryCapture, from torch's import or the first boundary
        self.window = None  # trace_window.StepWindow, from the first boundary when a window is asked for
        self.periodic_work = None  # periodic_work.PeriodicWork: torch.save and eval spans, once torch is imported
        self.user_profilers = None  # user_profilers.UserProfilers: the script's own torch.profiler, once imported
        self.compile_work = None  # compile_work.CompileWork: JAX and torch.compile compiles, once either is imported
        self.imports = None  # import_times.ImportTimes: the imports until the first step boundary
        self.held = []  # (t_ns, kind, fields) of the records made before the first step boundary
        self._torch_hooked = False

    # ---- the run folder
    def artifact(self, kind: RankFile) -> str:
        """This rank's file of ``kind`` (parsers.run_records: EVENTS, MEMORY_STATS, SNAPSHOT, TRACE), relative to the
        run folder."""
        return kind.path(self.rank)

    def in_run_dir(self, relative: str) -> str:
        return os.path.join(self.config.run_dir, relative)

    def expect(self, relative: str) -> None:
        """Announce an artifact this process will write (the parent lists those never written as missing)."""
        if relative not in self.expected:
            self.expected.add(relative)
            if self.events is not None and self.events.opened:
                self.events.append_line(
                    format_record(RUN_EXPECT, rank=self.rank, artifact=relative, t_ns=time.time_ns())
                )

    def write_record(self, kind, **fields) -> None:
        """Append one record of ``kind`` (a parsers.run_records.RecordKind written with this process's rank; ``fields``
        without it). Before the first step boundary (no events file, no rank yet) it is held, up to
        MAX_HELD_RECORDS, and written at ``start``; after the files closed, or while writes are off, nothing."""
        if self.disabled or self.faults.writes_off:
            return
        events = self.events
        if events is None:
            if len(self.held) < MAX_HELD_RECORDS:
                self.held.append((fields["t_ns"], kind, fields))
            return
        if not events.opened:
            return
        line = format_record(kind, rank=self.rank, **fields)
        with self.lock:
            events.append_line(line)

    def _write_held(self) -> None:
        """The records held before the first boundary, in time order, in one write (one the fault injection's line
        count does not see: how many imports are held varies, the kill tests count the lines after them)."""
        held, self.held = self.held, []
        if held:
            held.sort(key=lambda r: r[0])
            self.events.write(b"".join(format_record(kind, rank=self.rank, **fields) for _, kind, fields in held))

    # ---- the start
    def start_import_timing(self) -> None:
        """Time the imports from now until the first step boundary (import_times)."""
        try:
            from diagnose.launch.runtime.import_times import ImportTimes

            imports = ImportTimes(self, threading.get_ident())
            imports.install()
            self.imports = imports
        except Exception as e:
            self.faults.log_once("import-times", f"imports before the first step not timed ({e})")

    def stop_import_timing(self, keep: bool) -> None:
        """Take the import wrapper off; ``keep``: hand what it timed to write_record (the first boundary)."""
        imports, self.imports = self.imports, None
        if imports is None:
            return
        if keep:
            imports.finish()
        else:
            imports.uninstall()

    def on_torch_imported(self, torch) -> None:
        if self._torch_hooked or self.disabled:
            return
        self._torch_hooked = True
        self.steps.hook_optimizers()
        self.steps.hook_backward(torch)
        self.steps.hook_forward(torch)
        self.steps.hook_input_wait(torch)
        self.steps.arm_time_slices()
        self.steps.start_long_step_code()
        self._hook_periodic_work(torch)
        self._hook_user_profilers(torch)
        self._hook_compile_work("torch", torch)
        self._memory_capture().record_history_from_cuda_init(torch)

    def _hook_periodic_work(self, torch) -> None:
        """Checkpoint saves and evaluation spans as work records (periodic_work): only those calls pay."""
        from diagnose.launch.runtime.periodic_work import PeriodicWork

        try:
            work = PeriodicWork(self)
            work.hook(torch)
            self.periodic_work = work
        except Exception as e:
            self.faults.log_once("periodic-work", f"cannot watch torch.save and model.eval() ({e})")

    def _hook_user_profilers(self, torch) -> None:
        """The script's own torch.profiler starts and stops (user_profilers): the trace window gives way to it."""
        from diagnose.launch.runtime.user_profilers import UserProfilers

        try:
            users = UserProfilers(self)
            users.hook(torch)
            self.user_profilers = users
        except Exception as e:
            self.faults.log_once("user-profilers", f"cannot watch the script's torch.profiler ({e})")

    def _hook_compile_work(self, framework: str, module) -> None:
        """Compiles as work records (compile_work): JAX's monitoring events, torch.compile's dynamo callbacks."""
        try:
            if self.compile_work is None:
                from diagnose.launch.runtime.compile_work import CompileWork

                self.compile_work = CompileWork(self)
            if framework == "jax":
                self.compile_work.hook_jax(module)
            else:
                self.compile_work.hook_torch(module)
        except Exception as e:
            self.faults.log_once(f"compile-work-{framework}", f"cannot watch {framework}'s compiles ({e})")

    def unhook_compile_work(self) -> None:
        """Take the compile listener and callbacks out of jax and torch._dynamo."""
        work, self.compile_work = self.compile_work, None
        if work is not None:
            work.unhook()

    def unhook_torch(self) -> None:
        """Take off what this runtime put into torch outside the step sources (those are steps.unhook_all's)."""
        work, self.periodic_work = self.periodic_work, None
        if work is not None:
            work.unhook()
        users, self.user_profilers = self.user_profilers, None
        if users is not None:
            users.unhook()

    def on_jax_imported(self, jax) -> None:
        if not self.disabled:
            self.steps.hook_jit(jax)
            self.steps.arm_time_slices()
            self.steps.start_long_step_code()
            self._hook_compile_work("jax", jax)

    def _memory_capture(self):
        if self.memory is None:
            from diagnose.launch.runtime.memory_capture import MemoryCapture

            self.memory = MemoryCapture(self)
        return self.memory

    def start(self) -> bool:
        """At the first step boundary: rank, framework, files, the parts the boundary calls, exit hooks.
        False when this process records nothing (another one already records its rank)."""
        torch = sys.modules.get("torch")
        jax = sys.modules.get("jax")
        self.rank = rank_from_env()
        self.world_size = world_size_from_env()
        if torch is not None:
            self.framework = "torch"
            self.cuda = bool(torch.cuda.is_initialized())
            if self.rank is None:
                try:
                    if torch.distributed.is_available() and torch.distributed.is_initialized():
                        self.rank = torch.distributed.get_rank()
                        self.world_size = torch.distributed.get_world_size()
                except Exception:
                    pass
        if jax is not None and (torch is None or not self.cuda):
            self.framework = "jax"
            self.cuda = False
            try:
                if self.rank is None and jax.process_count() > 1:
                    self.rank = jax.process_index()
                    self.world_size = jax.process_count()
            except Exception:
                pass
        self.rank = 0 if self.rank is None else self.rank
        try:
            self.stop_import_timing(keep=True)  # its records join the held ones
        except Exception as e:
            self.faults.log_once("import-times", f"imports before the first step not recorded ({e})")
        if self.periodic_work is not None:
            try:
                self.periodic_work.catch_up()
            except Exception as e:
                self.faults.log_once("periodic-work-late", f"cannot watch the saves of a module imported early ({e})")
        self.events = JsonlAppender(self.in_run_dir(self.artifact(EVENTS)))
        try:
            self.events.append_line(
                format_record(
                    RUN_START,
                    rank=self.rank,
                    world_size=self.world_size,
                    pid=self.pid,
                    framework=self.framework,
                    mode=self.config.mode,
                    cuda=self.cuda,
                    versions=_framework_versions(torch, jax),
                    t_ns=time.time_ns(),
                    install_ns=self.install_ns,
                    **main_thread_ms(),
                    **cpus_allowed(),
                    **thread_count(),
                )
            )
        except FileExistsError:
            self.faults.log_once(
                "rank-taken",
                f"another process already records rank {self.rank} in this run "
                f"folder; this process (pid {self.pid}) records nothing",
            )
            self.held = []
            self.disabled = True
            return False
        self._write_held()
        self.expect(self.artifact(EVENTS))
        self.written.add(self.artifact(EVENTS))
        self._wire_parts(torch, jax)
        from diagnose.launch.runtime.exit_hooks import install as flush_at_exit

        stop_signal = flush_at_exit(lambda: self.flush("exit"))
        if stop_signal is not None:
            self.events.append_line(
                format_record(RUN_STOP_SIGNAL, rank=self.rank, pid=self.pid, signal=stop_signal, t_ns=time.time_ns())
            )
        return True

    def _wire_parts(self, torch, jax) -> None:
        steps, config = self.steps, self.config
        memory = steps.memory = self._memory_capture()
        gpu = self.cuda or _jax_on_gpu(jax)
        if not gpu:
            self.faults.log_once(
                "no-gpu",
                f"no GPU in use in this process (rank {self.rank}, "
                f"{self.framework or 'no framework'}); recording host step times only: "
                "no GPU time, memory stats or allocator history",
            )
        else:
            memory.open_stats()
        if memory.history_on:
            self.expect(self.artifact(SNAPSHOT))
        if self.cuda:
            from diagnose.launch.runtime.gpu_time import GpuTime

            steps.gpu = GpuTime(config.gpu_time_every, self.events, self.rank)
        if config.trace_steps > 0 and config.mode != "ncu":
            from diagnose.launch.runtime.trace_window import StepWindow

            self.window = steps.window = StepWindow(self)
        if config.nvtx and gpu:
            from diagnose.launch.runtime.nvtx_ranges import open_for_steps

            steps.nvtx = open_for_steps(config, self.events, self.rank, self.faults.log_once)

    # ---- switching off and the end
    def switch_off(self, write_nothing: bool) -> None:
        """Instrumentation off for the rest of the run: the window and the allocator history stopped (the trace
        still exported unless ``write_nothing``, a full disk, which also closes the files)."""
        self.disabled = True
        if self.window is not None:
            if write_nothing:
                self.window.stop_without_export()
            else:
                self.window.close_quietly()
        if self.memory is not None:
            self.memory.stop_history_quietly()
        if write_nothing:
            self._close_files()

    def _close_files(self) -> None:
        if self.events is not None:
            self.events.close()
        if self.memory is not None:
            self.memory.close()

    def flush(self, reason: str) -> None:
        """Write everything still held: pending steps, an open window, the snapshot, the end record."""
        if (self.disabled and self.events is None) or self.faults.writes_off:
            return
        try:  # before the lock: the sampler writes its last long step through it
            self.steps.stop_long_step_code()
        except Exception as e:
            self.faults.internal_error("long-step sampler", e)
        with self.lock:
            try:
                if self.events is None or not self.events.opened:
                    return
                steps, window, memory = self.steps, self.window, self.memory
                steps.drain(block_s=0.0)  # what is ready, before the heavy writes below
                if window is not None and window.profiler is not None:
                    window.close()
                if memory is not None and memory.history_on and not memory.snapshot_written:
                    memory.take_snapshot()
                steps.drain(block_s=2.0 if reason == "exit" else 0.0)
                self.events.append_line(
                    format_record(
                        RUN_END,
                        rank=self.rank,
                        reason=reason,
                        steps=steps.recorded,
                        written=sorted(self.written),
                        t_ns=time.time_ns(),
                        **main_thread_ms(),
                        **thread_count(),
                    )
                )
            except Exception as e:
                self.faults.internal_error("flush", e)
            finally:
                self._close_files()
                self.disabled = True


def _jax_on_gpu(jax) -> bool:
    if jax is None:
        return False
    try:
        return any(d.platform == "gpu" for d in jax.local_devices())
    except Exception:
        return False


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
