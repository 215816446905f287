"""Work that runs between steps every so often: checkpoint saving (``torch.save``) and evaluation
(``model.eval()`` … ``model.train()``), one ``{"kind": "work"}`` record each, with the user's line.

The step budget analyzer finds slow steps that recur every N steps; these records say what ran in them.
Nothing here runs per step: only the wrapped calls pay, and only on the main thread.

* ``torch.save``: the outermost call on the main thread gives one record: its duration, the step in
  progress, and the innermost user frame that called it (sync_capture.user_stack).
* ``torch.nn.Module.train`` (which ``eval()`` calls with False): a top-level ``train(False)`` starts an
  evaluation span on that module, the next top-level ``train(True)`` on the same module ends it and
  writes the record (start step, duration, where ``eval()`` was called). The recursive ``train()`` calls
  on the children run inside the top-level one and do not count (a depth guard). A span still open at
  exit is not written: it never returned to training.

Records are appended to the events file as they happen (one write each, like the sync and run records),
so they survive a crash. Before the first step boundary there is no events file and no step: calls then are
not recorded. Any error inside the wrappers goes to runtime.faults and the call itself runs unchanged.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from diagnose.launch.runtime.sync_capture import user_stack
from parsers.run_records import WORK, WORK_CHECKPOINT, WORK_EVALUATION, format_record


def write_work(runtime, what: str, step, t_ns: int, elapsed_ns: int, location: str | None, **extra) -> None:
    """Append one work record (checkpoint, evaluation, compilation, new shape) when this process records: after
    the first step boundary (a step to give it, the events file open) and while writes are on. One write under
    the runtime's lock, as sync and run records are written, so it survives a crash. ``extra``: the optional fields
    of parsers.run_records.WORK (``name``, ``cudnn_benchmark``)."""
    if step is None or runtime.disabled or runtime.faults.writes_off:
        return
    events = runtime.events
    if events is None or not events.opened:
        return
    line = format_record(
        WORK,
        what=what,
        rank=runtime.rank,
        step=step,
        t_ns=t_ns,
        ms=round(elapsed_ns / 1e6, 6),
        location=location,
        **extra,
    )
    with runtime.lock:
        events.append_line(line)


def caller_location(frame) -> str | None:
    """``file:line`` of the innermost user frame from ``frame`` outwards (None when there is none)."""
    stack = user_stack(frame)
    if not stack:
        return None
    file, line, _ = stack[0]
    return f"{file}:{line}"


class PeriodicWork:
    """The torch.save and Module.train wrappers of one Runtime, and the evaluation spans still open."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._main_thread = threading.get_ident()
        self._save_depth = 0
        self._train_depth = 0
        self._open_evals: dict[int, tuple[int, int, int | None, str | None]] = {}  # id(module) → span start
        self._torch = None
        self._original_save = None
        self._original_train = None

    # ---- hooking
    def hook(self, torch) -> None:
        """Wrap ``torch.save`` and ``torch.nn.Module.train``; a torch without them is left alone."""
        if self._torch is not None:
            return
        self._torch = torch
        save = getattr(torch, "save", None)
        if callable(save):
            wrapped = self._wrap_save(save)
            wrapped._gpudiag_original = save
            torch.save = wrapped
            self._original_save = save
        module_class = getattr(getattr(torch, "nn", None), "Module", None)
        train = module_class.__dict__.get("train") if module_class is not None else None
        if callable(train):
            wrapped = self._wrap_train(train)
            wrapped._gpudiag_original = train
            module_class.train = wrapped
            self._original_train = train

    def unhook(self) -> None:
        """Put the originals back, unless someone wrapped them after us (then ours stays, harmless)."""
        torch, self._torch = self._torch, None
        save, self._original_save = self._original_save, None
        train, self._original_train = self._original_train, None
        self._open_evals.clear()
        if torch is None:
            return
        if save is not None and getattr(torch.save, "_gpudiag_original", None) is save:
            torch.save = save
        module_class = torch.nn.Module
        if train is not None and getattr(module_class.__dict__.get("train"), "_gpudiag_original", None) is train:
            module_class.train = train

    # ---- the wrappers (the call itself always runs, unchanged, exactly once)
    def _wrap_save(self, original):
        work, get_ident, perf_ns = self, threading.get_ident, time.perf_counter_ns

        @functools.wraps(original)
        def save(*args, **kwargs):
            if work._save_depth or get_ident() != work._main_thread or work._runtime.disabled:
                return original(*args, **kwargs)
            work._save_depth = 1
            t_ns, started_ns, step = time.time_ns(), perf_ns(), work._current_step()
            try:
                return original(*args, **kwargs)
            finally:
                work._save_depth = 0
                work._record(WORK_CHECKPOINT, step, t_ns, perf_ns() - started_ns, sys._getframe(1))

        return save

    def _wrap_train(self, original):
        work, get_ident = self, threading.get_ident

        @functools.wraps(original)
        def train(module, mode=True):
            if work._train_depth or get_ident() != work._main_thread or work._runtime.disabled:
                return original(module, mode)
            work._train_depth = 1
            try:
                result = original(module, mode)
            finally:
                work._train_depth = 0
            work._on_top_level_train(module, mode, sys._getframe(1))
            return result

        return train

    def _current_step(self) -> int | None:
        try:
            return self._runtime.steps.current_step
        except Exception as e:
            self._runtime.faults.internal_error("checkpoint record", e)
            return None

    def _on_top_level_train(self, module, mode, caller) -> None:
        try:
            key = id(module)
            if not mode:
                if key not in self._open_evals and self._runtime.steps.current_step is not None:
                    self._open_evals[key] = (
                        time.perf_counter_ns(),
                        time.time_ns(),
                        self._runtime.steps.current_step,
                        caller_location(caller),
                    )
                return
            span = self._open_evals.pop(key, None)
            if span is not None:
                started_ns, t_ns, step, location = span
                write_work(self._runtime, WORK_EVALUATION, step, t_ns, time.perf_counter_ns() - started_ns, location)
        except Exception as e:
            self._runtime.faults.internal_error("evaluation span", e)

    def _record(self, what: str, step, t_ns: int, elapsed_ns: int, caller) -> None:
        try:
            if step is None or self._runtime.events is None:
                return  # before the first step boundary: no step to give it, no events file yet (no frame walk)
            write_work(self._runtime, what, step, t_ns, elapsed_ns, caller_location(caller))
        except Exception as e:
            self._runtime.faults.internal_error("checkpoint record", e)
