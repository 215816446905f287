"""What the main thread's Python runs in a long step, sampled: the code behind a slow step no hook names.

periodic_work names a slow step's checkpoint or evaluation only where a hook sees it (torch.save, model.eval()).
An evaluation outside jit in a JAX loop, metrics computed on the host, a log written every N steps, an
evaluation that never calls model.eval(): none of these passes a hook, and the step budget could only say "a step
is 49 ms slower" (issue 34's per-epoch evaluation outside jit). py-spy and Nsight Systems answer this by
sampling the Python stack; this does the same, only while a step runs long:

* A daemon thread polls: every ``POLL_S`` until it knows the loop's typical step, then when the step in progress
  would turn long (``wait_s``). It learns the typical step from the step numbers it sees advance (the time per
  step over its last polls), and the loop itself from one stack per poll of an ordinary step: the
  frames every one of the last ``LOOP_SAMPLES`` such stacks share, outermost first (the script's ``<module>``
  or ``main``; a Trainer's ``_inner_training_loop`` below the user's ``trainer.train()``).
* Once the step in progress has run ``LONG_MIN_MS`` and ``LONG_FACTOR`` typical steps, it reads the main thread's
  stack every ``SAMPLE_S``. What a sample runs is the frame just inside the loop's frames: the function the loop
  called (``evaluate`` called at the loop's line), or the loop's own line when the work is inline. Where too few
  ordinary steps were seen to know the loop (long steps most of the time), the frames 80 % of the long step's
  samples share stand for it, less the deepest: that deepest shared function is what runs.
* When that step ends, its samples become one work record (``what`` ``host-code``): the function most samples
  were in (``name``), at its most sampled line, the loop's line that called it (``caller``), the share of the
  samples in it and their count, and ``ms``: that share of the time sampled (a lower bound of the time the step
  spent there: the step's first ``LONG_FACTOR`` typical steps are not sampled). Where that function is a
  library's (HF Trainer's ``_maybe_log_save_evaluate``), it is the record's ``library_location`` and
  ``location`` is the user's innermost line (``trainer.train()``), as in the other work records.
* Each record also says what share of the step's samples were at a line of the loop ordinary steps are at
  (``ordinary_share``, see :func:`ordinary_share`): extra work runs from lines they are not at; a step whose own
  code only ran slower (a loaded host) runs from theirs, and the analysis does not name it as work
  (diagnose/derive/step_own_code.py). An ordinary step's stack is kept only once that step has ended without
  turning long: a poll in the first milliseconds of an evaluation step is not an ordinary step's. And it says how
  long the sampling ran (``sampled_ms``) and how much of that the main thread spent runnable but off every CPU
  (``run_queue_ms``, Linux's schedstat): a host busy with other processes shows there, as measured time.

The steps gpudiag's profiler window instruments are left alone: the profiler, not the script, makes them long.
Between long steps the thread compares two numbers per poll, and reads a stack at the first ``ORDINARY_STACKS``
polls (about 7 s of a loop of short steps) and then every ``LOOP_REFRESH``th. What a poll costs the loop is its
wake-up: the thread takes the GIL from a busy main thread (on the 2-core CPU host about 80 µs of the main thread's
time a wake-up, 0.3 % of it at 40 a second, the same for a thread that only sleeps). Waking when the step in
progress would turn long, a loop of short steps pays for one wake-up per ``LONG_MIN_MS`` (30 a second measured
there, against 40 when it polled every ``POLL_S``), one of 20 ms steps for about 12, and a long step is caught at
its threshold, not up to a poll later. A step shorter than ``LONG_MIN_MS`` is never sampled.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

from diagnose.launch.runtime.cpu_wait import run_queue_ns
from diagnose.launch.runtime.sync_capture import is_gpudiag_file, is_user_file

POLL_S = 0.02  # the wait while the typical step is unknown (and while no step runs)
MIN_WAIT_S = 0.001  # the shortest wait for a step to turn long
MAX_WAIT_S = 0.25  # the longest: the typical step is read again at least this often
SAMPLE_S = 0.005
LONG_MIN_MS = 30.0  # a step shorter than this is never sampled
LONG_FACTOR = 4.0  # ... nor one shorter than this many typical steps
TYPICAL_POLLS = 50  # the typical step: time per step over the last this many polls (1.5 s at 0.5 ms steps)
MAX_RECORDS = 1000  # long steps recorded in one run (a run of nothing but long steps needs no more)
LOOP_SAMPLES = 20  # ordinary steps' stacks the loop's frames are read from
LOOP_REFRESH = 25  # once that many are kept, one more stack every this many polls (0.75 s at 0.5 ms steps)
ORDINARY_STACKS = 200  # ordinary steps' stacks a long step's samples are compared with (ordinary_share)
MAX_DEPTH = 200  # frames read per stack
MAX_SAMPLES = 4000  # samples kept per long step (20 s at SAMPLE_S)
ORDINARY_MIN_STACKS = 5  # ordinary steps' stacks needed to say whether a long step ran what they run
SHARED_SHARE = 0.8  # of a long step's samples that share the frames taken for the loop's, where no ordinary step says


def long_after_ns(typical_ns: float) -> float:
    """How long a step runs before it counts as long: ``LONG_MIN_MS`` and ``LONG_FACTOR`` typical steps."""
    return max(LONG_MIN_MS * 1e6, LONG_FACTOR * typical_ns)


def wait_s(started_ns: int, now_ns: int, typical_ns: float | None) -> float:
    """Seconds until the next poll: until the step that started at ``started_ns`` turns long (between
    ``MIN_WAIT_S`` and ``MAX_WAIT_S``), or ``POLL_S`` while the typical step is unknown. A loop of short steps
    is polled about once per ``LONG_MIN_MS`` (each step starts the clock again), and never a poll late."""
    if typical_ns is None:
        return POLL_S
    return min(MAX_WAIT_S, max(MIN_WAIT_S, (started_ns + long_after_ns(typical_ns) - now_ns) / 1e9))


def stack_of(frame) -> list[tuple[str, str, int]]:
    """(file, function, line) of each frame, outermost first, gpudiag's own frames left out."""
    frames = []
    while frame is not None and len(frames) < MAX_DEPTH:
        code = frame.f_code
        if not is_gpudiag_file(code.co_filename):
            frames.append((code.co_filename, getattr(code, "co_qualname", code.co_name), frame.f_lineno))
        frame = frame.f_back
    frames.reverse()
    return frames


def loop_depth(loop_stacks) -> int:
    """How many outermost frames (by file and function) every stack of an ordinary step shares: the loop's."""
    stacks = list(loop_stacks)
    if not stacks:
        return 0
    depth = 0
    for frames in zip(*stacks):
        if any(f[:2] != frames[0][:2] for f in frames[1:]):
            break
        depth += 1
    return depth


def shared_depth(stacks, share: float = SHARED_SHARE) -> int:
    """How many outermost frames (by file and function) ``share`` of the stacks share: a long step's own samples
    where too few ordinary steps were seen to know the loop. Not all of them: a sample taken as the step ended, at
    the loop's own line, shares only the loop's frame, and "every sample" then put the loop one frame too high
    (the loop named as the work that ran)."""
    stacks = list(stacks)
    need = share * len(stacks)
    depth = 0
    while True:
        heads = collections.Counter(s[depth][:2] for s in stacks if len(s) > depth)
        if not heads:
            return depth
        head, n = heads.most_common(1)[0]
        if n < need:
            return depth
        stacks = [s for s in stacks if len(s) > depth and s[depth][:2] == head]
        depth += 1


def what_runs(stack: list[tuple[str, str, int]], depth: int) -> tuple[tuple[str, str, int], str | None, str | None]:
    """(the frame a long step's sample runs: the one just inside the loop's ``depth`` frames, or the innermost
    when the stack ends there; the loop line that called it; the user's innermost line)."""
    inside = stack[depth] if depth < len(stack) else stack[-1]
    at = min(depth, len(stack) - 1)
    caller = f"{stack[at - 1][0]}:{stack[at - 1][2]}" if at >= 1 else None
    user = next((f"{f[0]}:{f[2]}" for f in reversed(stack) if is_user_file(f[0])), None)
    return inside, caller, user


def ordinary_share(loop_stacks, depth: int, samples) -> float | None:
    """The share of a long step's ``samples`` whose loop frame (the ``depth``-th, the innermost every ordinary step
    shares) is at a line where the ordinary steps' stacks (``loop_stacks``) were: what the loop runs in every step.
    None where fewer than ``ORDINARY_MIN_STACKS`` are kept.

    Extra work (an evaluation, a save, a metric or a log every N steps) runs from a line of the loop no ordinary
    step is at (``evaluate()`` called at its own line; an inline block; HF Trainer's ``_maybe_log_save_evaluate()``
    call): near 0. A step whose own code only ran slower (the host busy with other processes: on a loaded 2-core
    host a Lightning run had 17 such steps, every sample in ``_AutomaticOptimization.run()`` under the loop line
    every ordinary step runs) is at their lines: near 1. The functions below that line are not compared: a thread
    reads the main thread's stack when the main thread lets go of the GIL, so samples gather where it is let go (a
    backward, a module call), differently in a slowed step and an ordinary one, and a slowed step's samples reach
    functions no ordinary stack holds (``mse_loss`` under the loss line, ``zero_grad``'s wrapper: a record that
    read 0 in one run of tests/launch/scripts/busy_host.py in three, when two functions were compared)."""
    stacks = list(loop_stacks)
    if len(stacks) < ORDINARY_MIN_STACKS or not samples or depth < 1:
        return None
    seen = {(s[depth - 1][0], s[depth - 1][2]) for s in stacks if len(s) >= depth}
    at_seen = sum(len(s) >= depth and (s[depth - 1][0], s[depth - 1][2]) in seen for s in samples)
    return at_seen / len(samples)


class LongStepCode:
    """Samples the main thread's Python while a step of ``steps`` (runtime.steps.Steps) runs long; one work record
    per long step through ``write`` (``write(step, t_ns, ms, location, name, caller, library, share, samples,
    ordinary_share, sampled_ms, run_queue_ms)``)."""

    def __init__(self, steps, write, main_thread_id: int | None = None, on_error=None):
        self._steps = steps
        self._write = write
        self._on_error = on_error  # an error stops the sampling and is told here, never as a thread's traceback
        self._main = main_thread_id if main_thread_id is not None else threading.main_thread().ident
        self._main_native = next(
            (t.native_id for t in threading.enumerate() if t.ident == self._main), None
        )  # the kernel's id of that thread: its run-queue wait
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared: paused, the thread waits without waking
        self._running.set()
        self._thread: threading.Thread | None = None
        self._seen = collections.deque(maxlen=TYPICAL_POLLS)  # (perf_ns, step) at each poll
        self._loop_stacks = collections.deque(maxlen=LOOP_SAMPLES)  # ordinary steps' stacks, the last few
        self._ordinary_stacks = collections.deque(maxlen=ORDINARY_STACKS)  # and more of them
        self._pending = None  # (step, its start, stack): read in a step not yet known to have stayed short
        self._polls = 0
        self.records = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_quietly, name="gpudiag-long-step-code", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def pause(self) -> None:
        """No wake-ups until resume() (the overhead benchmarks' plain arms)."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def typical_step_ns(self) -> float | None:
        """The time per step over the polls kept, or None before two polls saw the step number move."""
        seen = self._seen
        if len(seen) < 2:
            return None
        (t0, s0), (t1, s1) = seen[0], seen[-1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 else None

    def _main_stack(self) -> list[tuple[str, str, int]]:
        frame = sys._current_frames().get(self._main)
        try:
            return stack_of(frame) if frame is not None else []
        finally:
            del frame

    def _run_quietly(self) -> None:
        try:
            self._run()
        except Exception as e:
            if self._on_error is not None:
                try:
                    self._on_error(e)
                except Exception:
                    pass

    def _run(self) -> None:
        steps, stop = self._steps, self._stop
        wait = POLL_S
        while not stop.wait(wait):
            wait = POLL_S
            if not self._running.is_set():
                self._running.wait()
                continue
            step, started_ns = steps.current_step, steps._perf_ns
            if step is None or steps._instrumented:  # no step yet, or gpudiag's trace window slows this one
                continue
            now = time.perf_counter_ns()
            typical = self.typical_step_ns()
            self._seen.append((now, step))
            if typical is None or now - started_ns < long_after_ns(typical):
                self._polls += 1
                self._keep_pending(step, started_ns)
                if self._pending is None and (
                    len(self._ordinary_stacks) < ORDINARY_STACKS or self._polls % LOOP_REFRESH == 0
                ):
                    stack = self._main_stack()
                    if stack:
                        self._pending = (step, started_ns, stack)
                wait = wait_s(started_ns, now, typical)
                continue
            self._keep_pending(step, started_ns)
            self._pending = None  # read in this very step, which turned long: not an ordinary step's
            self._sample_step(step, started_ns)
            if self.records >= MAX_RECORDS:
                return

    def _keep_pending(self, step: int, started_ns: int) -> None:
        """The stack read in an earlier step is an ordinary step's once the step in progress is another one."""
        pending = self._pending
        if pending is not None and (pending[0], pending[1]) != (step, started_ns):
            self._loop_stacks.append(pending[2])
            self._ordinary_stacks.append(pending[2])
            self._pending = None

    def _sample_step(self, step: int, started_ns: int) -> None:
        """Sample until the step ends (or sampling stops), then write what the samples saw."""
        steps, stop = self._steps, self._stop
        stacks = []
        first_ns = time.perf_counter_ns()
        first_wall_ns = time.time_ns()
        queued_ns = run_queue_ns(self._main_native)
        while (
            steps.current_step == step
            and steps._perf_ns == started_ns
            and not steps._instrumented
            and not stop.is_set()
        ):
            stack = self._main_stack()
            if stack and len(stacks) < MAX_SAMPLES:
                stacks.append(stack)
            if stop.wait(SAMPLE_S):
                break
        sampled_ms = (time.perf_counter_ns() - first_ns) / 1e6
        queued_end_ns = run_queue_ns(self._main_native)
        if not stacks:
            return
        # the loop's frames, from ordinary steps; where too few were seen (long steps most of the time), the frames
        # most samples of this step share but the last: the deepest shared function is what runs
        depth = loop_depth(self._loop_stacks) if len(self._loop_stacks) >= 2 else max(0, shared_depth(stacks) - 1)
        counts: collections.Counter = collections.Counter()  # (file, function) -> samples
        lines: dict = collections.defaultdict(collections.Counter)  # (file, function) -> line -> samples
        callers: dict = collections.defaultdict(collections.Counter)  # (file, function) -> loop line
        users: dict = collections.defaultdict(collections.Counter)  # (file, function) -> user's innermost line
        for stack in stacks:
            (file, function, line), caller, user = what_runs(stack, depth)
            key = (file, function)
            counts[key] += 1
            lines[key][line] += 1
            if caller:
                callers[key][caller] += 1
            if user:
                users[key][user] += 1
        key, n = counts.most_common(1)[0]
        share = n / len(stacks)
        file, function = key
        where = f"{os.path.abspath(file)}:{lines[key].most_common(1)[0][0]}"
        ordinary = ordinary_share(self._ordinary_stacks, depth, stacks)
        caller = callers[key].most_common(1)[0][0] if callers[key] else None
        user = users[key].most_common(1)[0][0] if users[key] else None
        library = None
        if not is_user_file(file):
            library, where = where, user
        self.records += 1
        self._write(
            step=step,
            t_ns=first_wall_ns,
            ms=share * sampled_ms,
            location=where,
            name=function,
            caller=caller,
            library=library,
            share=round(share, 4),
            samples=len(stacks),
            ordinary_share=None if ordinary is None else round(ordinary, 4),
            sampled_ms=round(sampled_ms, 3),
            run_queue_ms=(
                None if queued_ns is None or queued_end_ns is None else round((queued_end_ns - queued_ns) / 1e6, 3)
            ),
        )
