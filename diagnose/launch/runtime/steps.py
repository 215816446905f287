"""Step boundaries and the step records: the runtime's per-step path.

Step boundaries come, in this order of precedence, from ``diagnose.step()`` (once a marker is
seen it alone defines steps), torch's global optimizer step hook (the first optimizer that
steps defines the step), or the end of each outermost backward pass (``torch.autograd.backward``,
which ``Tensor.backward`` calls): a loop that updates its weights by hand still has steps. Once a torch
optimizer has been made (``Optimizer.__init__`` is wrapped to say so), backward passes wait for it: up to
``BACKWARDS_BEFORE_OPTIMIZER_MAX`` of them end no step before its first ``step()``, so gradient accumulation
(several backwards per update) is one step per update from step 0. Before, the first update's backwards were steps
of their own (with 4 micro-batches, steps 0-2 were micro-batches and every later step number read 2 past the
script's; with 32, the warm-up and the trace window held micro-batches). An optimizer made only after backward
passes have defined steps takes over from its first step() on. In JAX, the
jitted function the script dispatches once per iteration defines steps (jit_steps). Each step
record says which source ended it. Step N is the work between boundary N and boundary N+1. At each boundary
the finished step is held as a plain tuple of the values as read (ms are computed when written); the held steps are
written at most every STEP_RECORD_INTERVAL_NS (and before anything heavy, and at exit), those whose GPU time is
known, in one write. The boundary calls the other parts directly (GPU time, NVTX, the
trace window, memory stats), each one attribute away, None when off: it was tuned to a few
µs a step (docs/measurements/h200-2026-12-03-interleaved.md, tools/boundary_breakdown.py), and each piece of light
mode's per-step cost, hooks included, is timed in place by benchmarks/light_step_pieces.py.
"""

from __future__ import annotations

import collections
import functools
import importlib
import sys
import threading
import time
from threading import get_ident
from time import perf_counter_ns

from diagnose.launch.child_config import nvtx_range_name
from diagnose.launch.runtime.phase_sites import BACKWARD, OPTIMIZER, PhaseSites
from parsers.run_records import INPUT_FROM_LOOP, jit_step_line, jit_step_lines, step_line  # the step record's formats

# Step records are written at most this often (and before anything heavy, and at every exit through
# Python): one write of many lines instead of one per step. Per-step writing cost 5 % of a 2.2 ms step
# on the H200 host (2026-12-03, benchmarks/light_overhead_paired.py); a SIGKILL or a crash in native
# code loses at most this much of the step log.
STEP_RECORD_INTERVAL_NS = 100_000_000
# Backward passes that end no step while a torch optimizer that was made has not stepped yet: gradient accumulation
# over up to this many micro-batches gives one step per update from step 0 (over more, the micro-batches before the
# first update are steps of their own, then the optimizer takes over). Past it, backward passes define steps: a loop
# that updates its weights by hand beside an optimizer it never steps loses this many iterations to the setup.
BACKWARDS_BEFORE_OPTIMIZER_MAX = 128
# A boundary that needs the runtime's lock and finds it held waits this long at most. The lock is reentrant, so only
# another thread holds it here: a record written from there (the long-step sampler's), which takes µs. Giving up at
# once, as before, dropped every boundary while such a write ran (their steps merged into one record); the bound
# keeps a stuck writer from stopping the training.
LOCK_WAIT_S = 1.0
# a held step record's fields outside the jit steady state (see Steps._pending); the steady state's are fewer
FULL_RECORD_FIELDS = 14


class Steps:
    """The step boundaries of one Runtime and the step records not yet written."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._lock = runtime.lock
        self.current_step = None  # the step in progress; None before the first boundary
        self.recorded = 0  # step records written
        self.optimizer_hook_handle = None
        self._marker_seen = False
        self._optimizer_id = None
        self._optimizer_made = False  # a torch optimizer was made: backward passes wait for its first step()
        self._backwards_waiting = 0  # backward passes that ended no step while waiting for it
        self._optimizer_init_original = None  # torch.optim.Optimizer.__init__ before we wrapped it
        self._backward_original = None  # torch.autograd.backward before we wrapped it
        self._backward_depth = 0  # nested backward passes (reentrant checkpointing) are not boundaries
        # the step's host phases (issue 31): ns inside outermost backward calls and optimizer step() calls since the
        # last boundary; hooked: both timed (torch's backward wrapped and its optimizers hooked)
        self._backward_ns = 0
        self._backward_passes = 0  # outermost backward calls in the step in progress
        self._passes_of_step = {}  # step -> its backward calls, for the finished steps that made more than one
        self._optimizer_ns = 0
        self.forward = None  # forward_time.ForwardTime once torch is imported: each step's forward host time
        # id(optimizer) -> (perf ns its step() began, _closure_ns then)
        self._optimizer_started: dict[int, tuple[int, int]] = {}
        self._closure_ns = 0  # host ns inside optimizer step closures so far (left out of the optimizer phase)
        self._phases_hooked = False
        self._phases_seen = False  # a backward or an optimizer step ran: a torch training loop, whose steps have phases
        # the phase timers (the backward wrapper in torch.autograd.backward, the optimizer pre hook) run in every step
        # until an optimizer or diagnose.step() defines the steps and the forward timer has learned its roots; from
        # then on in the forward's timed steps only (one in forward_time.TIMED_EVERY), see _open_phases
        self._phase_sampling = False
        self._step_phased = True  # the phase timers are on throughout the step in progress
        self._sample_open = False  # the step in progress is a sampled one: its boundary turns the timers off
        self._sampling_step = 0  # the next boundary _sampling is called at (see there)
        self._phase_timers_paused = False  # the overhead benchmarks' arms without them
        self.phase_sites = PhaseSites(runtime)  # the user's lines that call backward() and step(), from the first calls
        self._phases_every_step = False  # the benchmarks: timers in every step (set_phase_sampling)
        self._backward_wrapper = None
        self._pre_hook_reused = None  # forward_time.ReusedHook of optimizer_pre_hook_handle, once turned off
        self.optimizer_pre_hook_handle = None
        self._main_thread = threading.get_ident()
        self.jit = None  # jit_steps.JitStepFinder once jax is imported
        self.jit_dispatch = None  # jit_dispatch.JitDispatchSampler once jax is imported
        self._next_sample_step = 1 << 62  # the next jit step whose boundary asks jit_dispatch (its due_at)
        self.input_wait = None  # input_wait.InputWait once torch is imported
        self._input_mark_ns = 0  # input_wait.total_ns at the last boundary
        self._input_mark_calls = 0  # input_wait.calls at the last boundary
        self.loop_input = None  # loop_input.LoopInputWait once watching the training loop's for (Python 3.12+)
        self._loop_tried = False
        self._loop_mark_ns = self._loop_mark_calls = 0
        self.time_slices = None  # time_slices.TimeSlices once a framework is imported
        self.long_step_code = None  # long_step_code.LongStepCode once a framework is imported
        self.other_source_seen = False  # a step ended by anything but a time slice: no slicing from then on
        self._source = None
        self._perf_ns = 0
        self._wall_ns = 0
        self._event = None
        self._instrumented = False
        self._overhead_ns = 0  # host time of the boundary that started the current step (our own cost)
        # finished steps not yet written: (step, t_start_ns, start_perf_ns, end_perf_ns, start_event, end_event, source,
        # instrumented, overhead_ns, input_ns, input_from, backward_ns, optimizer_ns, forward_ns), plain tuples of the
        # values as read (a class instance per step cost more on the H200 host; ms are computed at the drain); in
        # on_jit_step's steady state the short (step, start_perf_ns, end_perf_ns, overhead_ns[, input_ns, input_from]),
        # whose wall clock the drain derives
        self._pending = collections.deque()
        # the next boundary is usual: like the last one, with no window, NVTX range or jit steady state to look after
        # (decided at the end of each boundary that is not; see _boundary)
        self._usual = False
        # on_jit_step's steady state: True while a JAX step needs nothing but its record (see _steady_now)
        self._steady = False
        self._jit_off = False  # a marker, an optimizer or backward passes define steps: jit calls are not boundaries
        self._wall_offset_ns = 0  # time.time_ns() - time.perf_counter_ns(), read again at each drain of the jit path
        self._next_due_perf_ns = 0  # the next drain or memory_stats record (the sooner): one comparison a step
        self._next_drain_perf_ns = 0
        self._next_stats_perf_ns = 0
        # the parts every boundary calls, wired by the runtime at the first boundary; None: that part is off
        self.gpu = None  # gpu_time.GpuTime, with CUDA
        self.nvtx = None  # an nvtx_ranges backend
        self._nvtx_handle = None
        self.window = None  # trace_window.StepWindow until it has closed
        self.memory = None  # memory_capture.MemoryCapture

    # ---- where boundaries come from
    def hook_optimizers(self) -> None:
        try:
            optimizer_module = importlib.import_module("torch.optim.optimizer")
            self.optimizer_pre_hook_handle = optimizer_module.register_optimizer_step_pre_hook(self.on_optimizer_start)
            self.optimizer_hook_handle = optimizer_module.register_optimizer_step_post_hook(self.on_optimizer_step)
            self._phases_hooked = self._backward_original is not None
            self._hook_optimizer_init(optimizer_module.Optimizer)
        except Exception as e:
            self._runtime.faults.log_once(
                "no-optimizer-hook", f"cannot hook torch optimizers ({e}); mark steps with diagnose.step()"
            )

    def _hook_optimizer_init(self, optimizer_class) -> None:
        """Wrap ``Optimizer.__init__`` (every torch optimizer's, through ``super().__init__``) to note that one was
        made; the wrapper passes every call on unchanged, and after the first it only calls through."""
        original = optimizer_class.__dict__.get("__init__")
        if original is None or self._optimizer_init_original is not None:
            return
        steps = self

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            steps._optimizer_made = True
            return original(self, *args, **kwargs)

        self._optimizer_init_original = (optimizer_class, original, __init__)
        optimizer_class.__init__ = __init__

    def unhook_all(self) -> None:
        """Take off every step source this runtime put into torch and jax."""
        if self.optimizer_hook_handle is not None:
            self.optimizer_hook_handle.remove()
            self.optimizer_hook_handle = None
        if self.optimizer_pre_hook_handle is not None:
            self.optimizer_pre_hook_handle.remove()
            self.optimizer_pre_hook_handle = None
        self._pre_hook_reused = None
        self._phases_hooked = False
        if self._optimizer_init_original is not None:
            optimizer_class, original, ours = self._optimizer_init_original
            self._optimizer_init_original = None
            if optimizer_class.__dict__.get("__init__") is ours:  # not wrapped again by someone after us
                optimizer_class.__init__ = original
        self.unhook_backward()
        if self.forward is not None:
            self.forward.unhook()
            self.forward = None
        if self.input_wait is not None:
            self.input_wait.unhook()
            self.input_wait = None
        self._steady = False
        if self.jit is not None:
            self.jit.unhook()
            self.jit = None
        if self.loop_input is not None:
            self.loop_input.disarm()
            self.loop_input = None
        if self.time_slices is not None:
            self.time_slices.disarm()
            self.time_slices = None
        self.stop_long_step_code()

    def stop_long_step_code(self) -> None:
        """Stop the long-step sampler; a long step it is sampling is written first (its thread is joined)."""
        sampler, self.long_step_code = self.long_step_code, None
        if sampler is not None:
            sampler.stop()

    def start_long_step_code(self) -> None:
        """Sample the Python that runs in long steps (long_step_code): one work record per long step. Not under
        --ncu: there every profiled step is long, made so by the profiler."""
        if self.long_step_code is not None or self._under_ncu():
            return
        from diagnose.launch.runtime.long_step_code import LongStepCode
        from diagnose.launch.runtime.periodic_work import write_work
        from parsers.run_records import WORK_HOST_CODE

        runtime = self._runtime

        def write(
            step, t_ns, ms, location, name, caller, library, share, samples, ordinary_share, sampled_ms, run_queue_ms
        ):
            extra = {"library_location": library} if library else {}
            if ordinary_share is not None:
                extra["ordinary_share"] = ordinary_share
            if run_queue_ms is not None:
                extra["run_queue_ms"] = run_queue_ms
            write_work(
                runtime,
                WORK_HOST_CODE,
                step,
                t_ns,
                int(ms * 1e6),
                location,
                name=name,
                caller=caller,
                share=share,
                samples=samples,
                sampled_ms=sampled_ms,
                **extra,
            )

        sampler = LongStepCode(
            self, write, self._main_thread, on_error=lambda e: runtime.faults.internal_error("long-step sampler", e)
        )
        sampler.start()
        self.long_step_code = sampler

    def _under_ncu(self) -> bool:
        """The run is under --ncu: its steps are as slow as the profiler makes them."""
        return getattr(getattr(self._runtime, "config", None), "mode", None) == "ncu"

    def arm_time_slices(self) -> None:
        """The last source: time slices when nothing else ends a step (time_slices)."""
        from diagnose.launch.runtime.time_slices import TimeSlices, start_after_from_env

        start_after_s = start_after_from_env()
        if self.time_slices is None and start_after_s is not None:
            slices = TimeSlices(self, start_after_s=start_after_s)
            if slices.arm():
                self.time_slices = slices

    def hook_jit(self, jax) -> None:
        """JAX: the jitted function dispatched once per iteration defines steps (jit_steps)."""
        from diagnose.launch.runtime.jit_dispatch import JitDispatchSampler
        from diagnose.launch.runtime.jit_steps import JitStepFinder

        if self.jit is None:
            self.jit = JitStepFinder(self)
            self.jit.hook(jax)
            self.jit_dispatch = JitDispatchSampler(jax)

    def on_jit_chosen(self, name: str, location: str | None) -> None:
        """The JAX step function is chosen: one run record of its name and the loop's line that calls it."""
        from parsers.run_records import JIT_STEP

        self._runtime.write_record(JIT_STEP, name=name, location=location, t_ns=time.time_ns())

    def on_jit_step(self):
        """A call of the chosen jitted step function: ``boundary("jit")``, and in the steady state its whole work.

        Returns None, or in a step jit_dispatch samples the call the proxy runs jax's function through (jit_steps).

        In a host-bound JAX loop each µs spent here costs 2-4 µs of step time (the dispatch right after waits on
        it: 1 µs of spin added 3.4-4.2 µs a step on a CPU host, 2026-12), so the steady state (``_steady_now``:
        the first steps, the trace window and the snapshot behind, no CUDA events or NVTX ranges) is written
        out here in one call layer: the same step record as ``_boundary``'s, held as a short tuple of the clock
        reads (the input waits read alike, only where there is a DataLoader or a loop watcher), its wall clock
        derived from perf_counter at the drain (the offset read again at each drain), one comparison for whether
        a drain or a memory_stats record is due and one for a sampled step, and one perf_counter read for both the
        step's start and the start of its overhead. It takes no lock, as torch's usual boundary takes none: it
        changes this object alone, and ``_due``, which writes files, takes the runtime's lock itself. The lock's
        acquire and release were 2.6 µs of a 5.7 µs boundary on the 2-core CPU host's 0.35 ms JAX step
        (scratch harness, interleaved, 2026-12-05). The long-step sampler reads ``current_step`` and then
        ``_perf_ns``; the new step's ``_perf_ns`` is written first, so it never pairs the new step with the old
        start. The short tuple and no input lookup took the steady path from 1.7 to 1.1 µs a call in a tight loop on
        the 2-core CPU host (2026-12-06), and the drain's one-pass format of such steps from 3.5 to 2.4 µs a step."""
        if self._jit_off or self._runtime.disabled:
            return None
        if self._steady and not self.memory.history_on:
            perf_ns = perf_counter_ns()
            through = None
            try:
                finished = self.current_step
                # steady: the finished step is a jit step, not instrumented, without GPU events (see _steady_now); its
                # record is the short tuple the drain expands (_steady_lines): most JAX loops fetch no DataLoader
                # batch and have no loop watcher (before Python 3.12), and then the input is not looked at
                if self.input_wait is None and self.loop_input is None and self._loop_tried:
                    self._pending.append((finished, self._perf_ns, perf_ns, self._overhead_ns))
                else:
                    input_ns, input_from = self._input_of_step(finished)
                    self._pending.append((finished, self._perf_ns, perf_ns, self._overhead_ns, input_ns, input_from))
                step = finished + 1
                self._perf_ns = perf_ns
                self.current_step = step
                if perf_ns >= self._next_due_perf_ns:
                    self._due(step, perf_ns, False, None)
                if step >= self._next_sample_step:
                    sampler = self.jit_dispatch
                    through = sampler.for_step(step)
                    self._next_sample_step = sampler.due_at
            except Exception as e:
                self._runtime.faults.internal_error("step boundary", e)
            self._overhead_ns = perf_counter_ns() - perf_ns
            return through
        lock = self._lock
        if not lock.acquire(True, LOCK_WAIT_S):
            return None
        perf_ns = perf_counter_ns()
        try:
            self._boundary("jit", perf_ns)
        except Exception as e:
            self._runtime.faults.internal_error("step boundary", e)
        finally:
            self._overhead_ns = perf_counter_ns() - perf_ns
            lock.release()
        return None

    def hook_input_wait(self, torch) -> None:
        """Time the loop's waits in torch DataLoader iterators: each step record's ``input_ms`` (input_wait); the
        batches' new shapes as work records (new_shapes); each loader's configuration as a run record
        (dataloader_config)."""
        from diagnose.launch.runtime.dataloader_config import LoaderConfigs
        from diagnose.launch.runtime.input_wait import InputWait
        from diagnose.launch.runtime.new_shapes import NewShapes

        if self.input_wait is None:
            wait = InputWait(
                self._main_thread,
                on_batch=NewShapes(self._runtime, torch).on_batch,
                loaders=LoaderConfigs(self._runtime),
            )
            if wait.hook(torch):
                self._input_mark_ns, self._input_mark_calls = wait.total_ns, wait.calls
                self.input_wait = wait

    def _watch_loop(self) -> None:
        """Python 3.12+: watch the training loop around this boundary's caller for its waits on its iterator."""
        from diagnose.launch.runtime.loop_input import LoopInputWait, available  # this form: not the diagnose package

        if not available():
            return
        watcher = LoopInputWait(self._main_thread)
        try:
            armed = watcher.arm(sys._getframe(1))  # walked outwards past gpudiag's and the step source's frames
        except Exception as e:  # never in the way of the steps: the input wait stays unmeasured
            watcher.disarm()
            self._runtime.faults.log_once("loop-input", f"cannot watch the training loop's for statement ({e})")
            return
        if armed:
            self._loop_mark_ns, self._loop_mark_calls = watcher.total_ns, watcher.calls
            self.loop_input = watcher

    def hook_forward(self, torch) -> None:
        """Time each step's forward pass, its outermost module calls (forward_time): the step records' ``forward_ms``."""
        from diagnose.launch.runtime.forward_time import ForwardTime

        if self.forward is None:
            forward = ForwardTime(self._main_thread)
            try:
                if forward.hook(torch):
                    self.forward = forward
                    self._sampling_step = 0
            except Exception as e:
                self._runtime.faults.log_once("forward-time", f"cannot time the forward pass ({e})")

    def hook_backward(self, torch) -> None:
        """Wrap ``torch.autograd.backward`` so the end of each outermost backward pass on the main thread is a
        boundary while no optimizer or marker defines steps. The wrapper calls the original unchanged."""
        autograd = getattr(torch, "autograd", None)
        original = getattr(autograd, "backward", None)
        if original is None or self._backward_original is not None:
            return
        steps, main_thread = self, self._main_thread

        @functools.wraps(original)
        def backward(*args, **kwargs):
            # every loss.backward() of the loop passes here: the outermost call on the main thread is timed, and ends
            # a step only while no optimizer defines steps (on_backward is not called once one does)
            if steps._backward_depth or get_ident() != main_thread:
                return _inner_backward(steps, original, args, kwargs)
            steps._backward_depth = 1
            if steps.phase_sites.backward_left:
                steps.phase_sites.look(BACKWARD, sys._getframe(1))
            started_ns = perf_counter_ns()
            try:
                result = original(*args, **kwargs)
            finally:
                steps._backward_depth = 0
                steps._backward_ns += perf_counter_ns() - started_ns
                steps._backward_passes += 1
                steps._phases_seen = True
            if steps._optimizer_id is None:
                steps.on_backward()
            return result

        self._backward_original = original
        self._backward_wrapper = backward
        autograd.backward = backward
        self._phases_hooked = self.optimizer_pre_hook_handle is not None

    def unhook_backward(self) -> None:
        self._phases_hooked = False
        self._phase_sampling = False
        self._backward_wrapper = None
        original, self._backward_original = self._backward_original, None
        torch = sys.modules.get("torch")
        if original is not None and torch is not None and getattr(torch.autograd, "backward", None) is not original:
            torch.autograd.backward = original

    def on_backward(self) -> None:
        if self._runtime.disabled or self._marker_seen or self._optimizer_id is not None:
            return
        if self._optimizer_made and self._source is None:
            # an optimizer exists and has not stepped yet: its first step() starts step 0, so that accumulated
            # backwards are no steps of their own; a loop whose optimizer never steps gets backward steps later
            if self._backwards_waiting < BACKWARDS_BEFORE_OPTIMIZER_MAX:
                self._backwards_waiting += 1
                return
        self.boundary("backward")

    def on_optimizer_start(self, optimizer, args, kwargs):
        """Every optimizer's step() start on the main thread: the optimizer phase of the step (issue 31).

        A step given a closure (Lightning's loop, LBFGS) runs the forward, the loss and the backward inside it: the
        closure is passed on wrapped in a timer (a pre hook may return new arguments), and its time is left out of
        the optimizer phase, which is the update alone. Without that, Lightning's optimizer phase held its backward
        too (counted twice) and the step's forward, and read 74 % of a CPU step."""
        if get_ident() != self._main_thread:
            return None
        if self.phase_sites.optimizer_left:
            self.phase_sites.look(OPTIMIZER, sys._getframe(1))
        closure = kwargs.get("closure") if kwargs else None
        in_kwargs = closure is not None
        if not in_kwargs and args:
            closure = args[0]
        self._optimizer_started[id(optimizer)] = (perf_counter_ns(), self._closure_ns)
        if not callable(closure):
            return None
        timed = _timed_closure(self, closure)
        return (args, {**kwargs, "closure": timed}) if in_kwargs else ((timed, *args[1:]), kwargs)

    def on_optimizer_step(self, optimizer, args, kwargs) -> None:
        """Every optimizer's step() end: the end of its optimizer phase and, for the optimizer that defines steps, the
        step boundary. One clock read is both: the boundary starts where the phase ends."""
        perf_ns = perf_counter_ns()
        key = id(optimizer)
        started = self._optimizer_started.pop(key, None)
        if started is not None:
            started_ns, closure_ns = started
            self._optimizer_ns += perf_ns - started_ns - (self._closure_ns - closure_ns)
            self._phases_seen = True
        if self._runtime.disabled or self._marker_seen:
            return
        if key != self._optimizer_id:
            if self._optimizer_id is not None:
                return  # another optimizer (a GAN's second one): its phase is timed, it ends no step
            self._optimizer_id = key
            self._jit_off = True
            if self._source == "backward":
                # backward passes defined the steps so far; this iteration (which began at the last backward's
                # end) now ends at the next optimizer step, and the optimizer defines steps from here on
                self._source = "optimizer"
                return
        self.boundary("optimizer", perf_ns)

    def marker(self) -> None:
        if self._runtime.disabled:
            return
        if not self._marker_seen:
            self._marker_seen = True
            self._jit_off = True
            if self._source in ("optimizer", "backward"):
                # this iteration already ended at optimizer.step() or backward(); the marker takes over from the next one
                self._source = "marker"
                return
        self.boundary("marker")

    # ---- the boundary
    def boundary(self, source: str, perf_ns: int | None = None) -> None:
        """A step boundary from ``source``; ``perf_ns``: the caller's clock read at the boundary (the optimizer
        hook's), read here when None. The boundary's own time, from that read on, is the new step's overhead_ns.

        Most boundaries are usual (``_usual``, decided at the end of each one that is not): the same source as the
        last, no NVTX range to end or start, no trace window, no allocator history (read each time: CUDA's lazy init
        may turn it on), no jit steady state. A usual boundary changes this object alone, so it takes the runtime's
        lock only for what writes files (``_due``): the lock was 1.35 µs of each step on the 2-core CPU host
        (benchmarks/light_step_pieces.py). Other boundaries hold it throughout."""
        runtime = self._runtime
        if runtime.disabled:  # a forked child is switched off by lifecycle's os.register_at_fork hook
            return
        if perf_ns is None:
            perf_ns = perf_counter_ns()
        usual = self._usual and source == self._source and not self.memory.history_on
        lock = None if usual else self._lock
        if lock is not None and not lock.acquire(True, LOCK_WAIT_S):  # another thread's write is under way
            return
        try:
            self._boundary(source, perf_ns, usual)
        except Exception as e:
            runtime.faults.internal_error("step boundary", e)
        finally:
            # the boundary runs inside the step it starts, so its time is in that step's host_ms;
            # recording it per step lets the report say how much of a step is gpudiag's own work
            self._overhead_ns = perf_counter_ns() - perf_ns
            if lock is not None:
                lock.release()

    def _boundary(self, source: str, perf_ns: int, usual: bool = False) -> None:
        """The boundary's work at ``perf_ns``: the finished step held as a tuple, the next one started. A usual one
        (see boundary) skips the checks only the others need; what runs now and then (a drain, a memory_stats record,
        a choice of k) is behind one comparison."""
        wall_ns = time.time_ns()
        finished = self.current_step
        if not usual:
            if source != "time":
                self.other_source_seen = True
                if source == "backward":  # from now on backward passes, an optimizer or a marker define steps
                    self._jit_off = True
            if finished is None and not self._runtime.start():  # the first boundary wires the parts
                return
            if self.nvtx is not None and self._nvtx_handle is not None:
                self.nvtx.end(self._nvtx_handle)
                self._nvtx_handle = None
        step = 0 if finished is None else finished + 1
        wait = self.input_wait
        if wait is not None and wait.paused:  # an evaluation whose module went back to training without train()
            wait.resume_check()
        input_ns, input_from = self._input_of_step(finished)
        gpu = self.gpu
        event = None
        if gpu is not None and (self._event is not None or step % gpu.every == 0):
            event = gpu.record_event()
        # the forward timer and the phases sampled with it: one comparison, but at the boundaries they need
        forward_ns = None
        step_phased = self._step_phased  # the phase timers were on throughout the step that ended
        if step >= self._sampling_step:
            forward_ns = self._sampling(step)
        heavy = False
        if finished is not None:
            if gpu is not None and finished > 0 and not self._instrumented:
                gpu.host_ns.append(perf_ns - self._perf_ns)
            phased = self._phases_hooked and self._phases_seen and step_phased
            self._pending.append(
                (
                    finished,
                    # after on_jit_step's steady state, which keeps no wall clock, derived as its drain does
                    self._perf_ns + self._wall_offset_ns if self._steady else self._wall_ns,
                    self._perf_ns,
                    perf_ns,
                    self._event,
                    event if self._event is not None else None,
                    self._source,
                    self._instrumented,
                    self._overhead_ns,
                    input_ns,
                    input_from,
                    self._backward_ns if phased else None,
                    self._optimizer_ns if phased else None,
                    forward_ns if phased else None,
                )
            )
            if not usual:
                # only the window's close and the snapshot are heavy; most steps have neither left to do
                window = self.window
                heavy = (
                    (window is not None and window.profiler is not None) or self.memory.history_on
                ) and self._after_step(finished)
        if self._backward_passes > 1 and finished is not None and phased:  # gradient accumulation's micro-batches
            self._passes_of_step[finished] = self._backward_passes
        self._backward_ns = self._optimizer_ns = self._backward_passes = 0  # the new step's phases start here
        if not usual and self.window is not None and step == self.window.first_step:
            # before the new step shows: the long-step sampler must leave the profiler's start and the window alone
            # (it sampled the 2.4 s start on the CPU host as the step's "Tensor.backward", and its own Python calls
            # made 93,038 of a three-step window's 95,520 Python function events)
            self._instrumented = True
        self.current_step = step
        self._source = source
        instrumented = heavy  # the window's export or the snapshot ran at the start of this step
        if not usual:
            window = self.window
            if window is not None:
                if step == window.first_step:
                    window.open(step)
                if window.profiler is not None:
                    window.steps.append((step, wall_ns))
                    instrumented = True
        self._instrumented = instrumented
        if heavy or perf_ns >= self._next_due_perf_ns or (gpu is not None and step >= gpu.next_check):
            self._due(step, perf_ns, heavy, gpu)
        self._perf_ns = perf_ns
        self._wall_ns = wall_ns
        self._event = event if event is not None and step % gpu.every == 0 else None
        if usual:
            return
        if self.nvtx is not None:
            self._nvtx_handle = self.nvtx.start(nvtx_range_name(step))
        if source == "jit" and self._steady_now():  # the next jit boundaries take on_jit_step's steady state
            if not self._steady:
                self._wall_offset_ns = wall_clock_offset_ns()
                if self.jit_dispatch is not None and not self._under_ncu():  # ncu's steps are not the script's
                    self.jit_dispatch.start(step)
                    self._next_sample_step = self.jit_dispatch.due_at
            self._steady = True
        elif self._steady:
            self._steady = False
        self._usual = self.nvtx is None and self.window is None and source != "jit"

    # ---- the forward timer and the phase timers, sampled
    def _sampling(self, step: int) -> int | None:
        """The boundary that starts ``step``, where the forward timer or the sampled phases need it: the forward ns of
        the step that ended (None where it was not timed), the timers off after a timed step and on for the next
        one. Sets ``_sampling_step``, the next boundary that needs this: each one while the forward timer learns its
        roots, the one after a timed step starts (and after a stop put off inside a module call), else the next
        timed step. A usual boundary otherwise read four attributes of two objects here (0.3 µs of its 2.0 in a
        tight loop on the 2-core CPU host); an overhead benchmark that pauses and resumes the forward timer sets
        ``_sampling_step`` to 0 so the schedule is read again."""
        forward = self.forward
        if forward is None:
            self._sampling_step = 1 << 62  # hook_forward sets it back to 0
            return None
        if not forward.settled:
            self._sampling_step = step + 1
            return forward.on_boundary()
        forward_ns = None
        if self._sample_open:
            self._close_phases()
        if forward.timing:  # one step in TIMED_EVERY has the roots' hooks on: its forward ns are all there is
            forward_ns = forward.ns
            forward.ns = 0
            forward.stop_timing()
        elif step >= forward.next_timed:
            forward.start_timing(step)
            self._open_phases()
        self._sampling_step = step + 1 if forward.timing or self._sample_open else forward.next_timed
        return forward_ns

    def _open_phases(self) -> None:
        """A step the forward timer times starts: the phase timers time it too. The first such step after an
        optimizer or diagnose.step() has taken over the steps starts the sampling (until then backward passes may
        end steps, or wait for the optimizer's first step, and the wrapper must see each one).

        Why sampled: the wrapper and the pre hook cost 5 µs of each 0.71 ms step of examples/train_mlp.py's model
        on the 2-core CPU host (benchmarks/light_overhead_interleaved.py's no-phases arm, 0.76 points of light's
        +2.72 %, 2026-12-06), about as much as the boundary itself; in the forward's timed step, already the slow
        one, they move the median step no further (the same benchmark's phases-every-step arm: +2.72 % against
        light's +2.18 % in one run). The phases of the median step are read from these steps
        (diagnose/derive/host_phases.py), as the forward's were."""
        if not self._phase_sampling:
            if self._phases_every_step or not self._phases_may_sample():
                return  # every step keeps its timers
            self._phase_sampling = True  # on now: this step is the first sampled one
        else:
            self._set_phase_timers(True)
        self._step_phased = True
        self._sample_open = True

    def _phases_may_sample(self) -> bool:
        """Both timers are in and no backward pass can end a step: an optimizer or diagnose.step() defines them."""
        return self._phases_hooked and (self._optimizer_id is not None or self._marker_seen)

    def set_phase_sampling(self, on: bool) -> None:
        """The phase timers in the sampled steps only (on: light mode's way) or in every step (off: as light mode ran
        before 2026-12-06; the overhead benchmarks' arm that says what the sampling saves, and light_step_pieces,
        which times each hook where it runs)."""
        self._phases_every_step = not on
        if not on:
            self._phase_sampling = False
            self._step_phased = True
            self._set_phase_timers(True)
        elif self._phases_may_sample() and not self._phase_sampling:
            self._phase_sampling = True
            if not self._sample_open:  # not in a sampled step: off until the next one (this step goes unphased)
                self._set_phase_timers(False)
                self._step_phased = False

    def _close_phases(self) -> None:
        """The sampled step has ended: the phase timers off until the next one."""
        self._sample_open = False
        if self._phase_sampling:
            self._set_phase_timers(False)
            self._step_phased = False

    def _set_phase_timers(self, on: bool) -> None:
        """The backward wrapper in ``torch.autograd.backward`` (where nobody replaced it since) and the optimizer
        pre hook (its entry back in torch's table, as forward_time.ReusedHook puts a module's back) on or off."""
        if on and self._phase_timers_paused:
            return
        torch = sys.modules.get("torch")
        autograd = getattr(torch, "autograd", None)
        wrapper, original = self._backward_wrapper, self._backward_original
        if wrapper is not None and autograd is not None:
            current = getattr(autograd, "backward", None)
            if on and current is original:
                autograd.backward = wrapper
            elif not on and current is wrapper:
                autograd.backward = original
        reused = self._pre_hook_reused
        if reused is None and self.optimizer_pre_hook_handle is not None:
            from diagnose.launch.runtime.forward_time import ReusedHook

            reused = self._pre_hook_reused = ReusedHook(self.optimizer_pre_hook_handle)
        if reused is not None:
            reused.on() if on else reused.off()

    def pause_phase_timers(self) -> None:
        """The phase timers off until resume_phase_timers (the overhead benchmarks' arms without them)."""
        self._phase_timers_paused = True
        self._set_phase_timers(False)

    def resume_phase_timers(self) -> None:
        self._phase_timers_paused = False
        if self._step_phased:
            self._set_phase_timers(True)

    def _due(self, step: int, perf_ns: int, heavy: bool, gpu) -> None:
        """What a boundary does now and then: write the held step records (every STEP_RECORD_INTERVAL_NS, and
        after anything heavy), a memory_stats record (when maybe_stats says), a choice of k (gpu_time). They write
        files, so they hold the runtime's lock (reentrant: a boundary that is not usual holds it already; a usual one
        and on_jit_step's steady state take it only here). In the jit steady state each drain also reads the wall clock's offset again: its records' wall
        clock is derived from perf_counter."""
        lock = self._lock
        if not lock.acquire(True, LOCK_WAIT_S):
            return  # due again at the next boundary
        try:
            if heavy or perf_ns >= self._next_drain_perf_ns:
                self._next_drain_perf_ns = perf_ns + STEP_RECORD_INTERVAL_NS
                self.drain(block_s=0.0)
                if self._steady:
                    self._wall_offset_ns = wall_clock_offset_ns()  # a step of the wall clock shows from here on
            if perf_ns >= self._next_stats_perf_ns:  # a memory_stats record may be due: maybe_stats says until when
                next_stats_ns = self.memory.maybe_stats(step, perf_ns)
                self._next_stats_perf_ns = perf_ns if next_stats_ns is None else next_stats_ns
            self._next_due_perf_ns = min(self._next_drain_perf_ns, self._next_stats_perf_ns)
            if gpu is not None and step >= gpu.next_check:
                gpu.choose(step)
        finally:
            lock.release()

    def _steady_now(self) -> bool:
        """True when the next jit boundary needs no more than on_jit_step's steady state does: the step in progress
        is a jit step (so ``_source`` stays "jit": marker() and on_optimizer_step() change it only from
        "optimizer" or "backward") and not instrumented; no CUDA events, NVTX ranges, trace window (closed, or
        none asked for) or allocator history. The parts are wired at the first boundary and the window is
        dropped at its close, both here in _boundary, which decides this again each time; unhook_all switches it
        off; ``memory.history_on`` (turned on by CUDA's lazy init, any time) is read at each jit boundary."""
        return (
            self.nvtx is None  # first: under ncu every jit boundary comes here
            and self.gpu is None
            and self.window is None
            and self.current_step is not None
            and self._source == "jit"
            and not self._instrumented
            and not self.memory.history_on
        )

    def _input_of_step(self, finished: int | None) -> tuple[int | None, str | None]:
        """The finished step's input wait (ns) and where from: the DataLoader wait since the last boundary if it
        fetched any batch (input_wait), else the loop's own wait for its iterator ("loop", loop_input); the loop is
        looked for once, at the first step that fetched nothing from a DataLoader."""
        input_ns = None
        wait = self.input_wait
        if wait is not None and wait.calls != self._input_mark_calls:  # no new fetch: its total has not moved either
            total_ns = wait.total_ns
            input_ns = total_ns - self._input_mark_ns
            self._input_mark_ns, self._input_mark_calls = total_ns, wait.calls
        if self.loop_input is not None or (input_ns is None and not self._loop_tried and finished is not None):
            return self._loop_input_of_step(input_ns)
        return input_ns, None

    def _loop_input_of_step(self, input_ns: int | None) -> tuple[int | None, str | None]:
        """The loop's part of _input_of_step: its wait when no DataLoader fetch was seen (and the marks moved on), or
        the first look for the loop."""
        input_from = None
        loop = self.loop_input
        if loop is not None:
            loop_ns, loop_calls = loop.total_ns, loop.calls
            if input_ns is None and loop_calls != self._loop_mark_calls:
                input_ns, input_from = loop_ns - self._loop_mark_ns, "loop"
            self._loop_mark_ns, self._loop_mark_calls = loop_ns, loop_calls
        elif input_ns is None and not self._loop_tried:
            self._loop_tried = True
            self._watch_loop()
        return input_ns, input_from

    def _after_step(self, finished: int) -> bool:
        """Close the window / write the snapshot after step ``finished``; True when anything heavy ran.

        The step records held so far are written first: a kill during the export loses none of them."""
        heavy = False
        window = self.window
        if window is not None and window.profiler is not None and finished == window.last_step:
            self.drain(block_s=0.0)
            self.window = None  # one window a run: later boundaries skip it
            window.close(step=finished + 1)  # this boundary starts step finished + 1: the export's time is in it
            if self.loop_input is not None:
                self.loop_input.rearm()
            heavy = True
        if self.memory.snapshot_due(finished):
            self.drain(block_s=0.0)
            self.memory.take_snapshot(step=finished + 1)
            heavy = True
        return heavy

    # ---- the step records
    def drain(self, block_s: float) -> None:
        """Write the held step records whose GPU time is known (all of them after ``block_s`` at most), in one write."""
        deadline = time.monotonic() + block_s if block_s else None
        lines = []
        pending, line_of, rank = self._pending, step_line, self._runtime.rank
        samples = self.jit_dispatch.samples if self.jit_dispatch is not None else None
        passes = self._passes_of_step
        offset_ns = self._wall_offset_ns
        try:
            while pending:
                if len(pending[0]) < FULL_RECORD_FIELDS:  # on_jit_step's short (step, start, end, overhead[, input])
                    lines += self._steady_lines(offset_ns, samples)
                    continue
                (
                    step,
                    t_start_ns,
                    start_perf_ns,
                    end_perf_ns,
                    start_event,
                    end_event,
                    source,
                    instrumented,
                    overhead_ns,
                    input_ns,
                    input_from,
                    backward_ns,
                    optimizer_ns,
                    forward_ns,
                ) = pending[0]
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
                pending.popleft()
                sample = samples.pop(step, None) if samples else None
                lines.append(
                    line_of(
                        rank,
                        step,
                        t_start_ns,
                        (end_perf_ns - start_perf_ns) / 1e6,
                        gpu_ms,
                        source,
                        instrumented,
                        overhead_ns / 1e3,
                        None if input_ns is None else input_ns / 1e6,
                        input_from,
                        None if backward_ns is None else backward_ns / 1e6,
                        None if optimizer_ns is None else optimizer_ns / 1e6,
                        None if forward_ns is None else forward_ns / 1e6,
                        *(() if sample is None else _sample_ms(sample)),
                        backward_passes=passes.pop(step, None) if passes else None,
                    )
                )
        finally:
            if lines:
                self._runtime.events.append_lines(lines)
                self.recorded += len(lines)

    def _steady_lines(self, offset_ns: int, samples: dict | None) -> list[bytes]:
        """The lines of the run of on_jit_step's short records at the head of ``_pending``, taken off it: those with
        no input wait and no sample in one pass (jit_step_lines), the others one by one."""
        pending, rank = self._pending, self._runtime.rank
        plain, lines = [], []
        while pending and len(pending[0]) < FULL_RECORD_FIELDS:
            held = pending.popleft()
            sample = samples.pop(held[0], None) if samples else None
            if len(held) == 4 and sample is None:
                plain.append(held)
                continue
            if plain:
                lines += jit_step_lines(rank, offset_ns, plain)
                plain = []
            step, start_ns, end_ns, overhead_ns = held[:4]
            input_ns, input_from = held[4:] or (None, None)
            if sample is None:
                lines.append(
                    jit_step_line(
                        rank,
                        step,
                        start_ns + offset_ns,
                        end_ns - start_ns,
                        overhead_ns,
                        input_ns,
                        input_from == INPUT_FROM_LOOP,
                    )
                )
                continue
            lines.append(
                step_line(
                    rank,
                    step,
                    start_ns + offset_ns,
                    (end_ns - start_ns) / 1e6,
                    None,
                    "jit",
                    False,
                    overhead_ns / 1e3,
                    None if input_ns is None else input_ns / 1e6,
                    input_from,
                    None,
                    None,
                    None,
                    *_sample_ms(sample),
                )
            )
        if plain:
            lines += jit_step_lines(rank, offset_ns, plain)
        return lines


def _sample_ms(sample: tuple[int, int | None, int | None]) -> tuple[float, float | None, float | None]:
    """jit_dispatch's (dispatch, ready, queued) ns of a step as step_line's dispatch_ms, ready_ms, queued_ms."""
    return tuple(None if ns is None else ns / 1e6 for ns in sample)


def _timed_closure(steps: Steps, closure):
    """``closure`` with its host time added to ``steps._closure_ns`` (all of its calls: LBFGS calls it several times)."""

    @functools.wraps(closure)
    def timed(*args, **kwargs):
        started_ns = perf_counter_ns()
        try:
            return closure(*args, **kwargs)
        finally:
            steps._closure_ns += perf_counter_ns() - started_ns

    return timed


def _inner_backward(steps: Steps, original, args, kwargs):
    """A backward pass inside an outermost one (reentrant checkpointing), or on another thread: no timing, no
    boundary; the depth keeps an inner one's end from being taken for the outermost's."""
    if get_ident() != steps._main_thread:
        return original(*args, **kwargs)
    steps._backward_depth += 1
    try:
        return original(*args, **kwargs)
    finally:
        steps._backward_depth -= 1


def wall_clock_offset_ns() -> int:
    """``time.time_ns() - time.perf_counter_ns()``, read between two perf_counter reads (the closest of three).

    On Linux perf_counter is CLOCK_MONOTONIC, which NTP slews at the same rate as the wall clock, so the offset
    changes only when the wall clock is stepped; the jit path reads it again at each drain (every
    STEP_RECORD_INTERVAL_NS), so its step records' t_start_ns stay within a read's width of ``time.time_ns()``."""
    best_width_ns = best_offset_ns = None
    for _ in range(3):
        before_ns = perf_counter_ns()
        wall_ns = time.time_ns()
        after_ns = perf_counter_ns()
        if best_width_ns is None or after_ns - before_ns < best_width_ns:
            best_width_ns, best_offset_ns = after_ns - before_ns, wall_ns - (before_ns + after_ns) // 2
    return best_offset_ns
