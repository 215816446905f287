"""Work that runs between steps every so often: checkpoint saving (``torch.save``, safetensors'
``save_file``/``save_model``, ``torch.distributed.checkpoint``'s ``save``/``async_save``) and evaluation
(``model.eval()`` … ``model.train()``), one ``{"kind": "work"}`` record each, with the user's line. While an
evaluation runs, DataLoader fetches are not the training loop's input: input_wait is paused (no input wait, no new
shape from the evaluation's batches).

The step budget analyzer finds slow steps that recur every N steps; these records say what ran in them, and the run
budget what ran before the first step. Nothing here runs per step: only the wrapped calls pay, and only on the main
thread.

* Checkpoints: the outermost save on the main thread gives one record, ``name`` what saved (``torch.save``,
  ``safetensors``, ``torch.distributed.checkpoint``; a torch.save inside a dcp save, or a safetensors
  ``save_file`` inside ``save_model``, counts once, as the outermost): its duration (``async_save``: the call's
  own blocking time), the step in progress, and the innermost user frame that called it (sync_capture.user_stack).
  safetensors.torch and dcp's state_dict_saver are wrapped when the script imports them (import_hooks), never
  imported here.
* ``torch.nn.Module.train`` (which ``eval()`` calls with False): a top-level ``train(False)`` starts an
  evaluation span on that module, the next top-level ``train(True)`` on the same module ends it and
  writes the record (start step, duration, where ``eval()`` was called). The recursive ``train()`` calls
  on the children run inside the top-level one and do not count (a depth guard). A span still open at
  exit is not written: it never returned to training.

Each record also names the library frame that made the call (``library_location``: the innermost frame outside
torch, jax, safetensors and gpudiag, when it is not the user's: HF Trainer's ``model.eval()`` line beside the user's
``trainer.train()``). Records are appended to the events file as they happen (one write each, like the sync and run
records), so they survive a crash. Before the first step boundary there is no events file: a save or an
evaluation span then has step -1 and its record is held by the runtime and written right after the run's start
record at the first boundary (coordinator.Runtime.write_record); a process that never steps writes none. Any error
inside the wrappers goes to runtime.faults and the call itself runs unchanged.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from diagnose.launch.runtime.sync_capture import library_location, user_stack
from parsers.run_records import (
    BEFORE_FIRST_STEP,
    CHECKPOINT_DISTRIBUTED,
    CHECKPOINT_SAFETENSORS,
    CHECKPOINT_TORCH_SAVE,
    WORK,
    WORK_CHECKPOINT,
    WORK_EVALUATION,
)

SAFETENSORS_MODULE = "safetensors.torch"
SAFETENSORS_SAVES = ("save_file", "save_model")
DCP_SAVER_MODULE = "torch.distributed.checkpoint.state_dict_saver"
DCP_PACKAGE = "torch.distributed.checkpoint"
DCP_SAVES = ("save", "async_save")
# the packages whose own frames are passed over when looking for the library frame that called into them


_NO_STEP = object()  # the step could not be read (an internal error, already reported): no record


def write_work(runtime, what: str, step, t_ns: int, elapsed_ns: int, location: str | None, **extra) -> None:
    """Append one work record (checkpoint, evaluation, compilation, new shape, import, gpudiag) while writes are on:
    through ``runtime.write_record``, which writes it at once (one write under the runtime's lock, so it survives a
    crash) or, before the first step boundary, holds it until the run's start record is written. A ``step`` of None
    (no step yet) is -1. ``extra``: the optional fields of parsers.run_records.WORK (``name``, ``cudnn_benchmark``,
    ``library_location``)."""
    if runtime.disabled or runtime.faults.writes_off:
        return
    runtime.write_record(
        WORK,
        what=what,
        step=BEFORE_FIRST_STEP if step is None else step,
        t_ns=t_ns,
        ms=round(elapsed_ns / 1e6, 6),
        location=location,
        **extra,
    )


def caller_location(frame) -> str | None:
    """``file:line`` of the innermost user frame from ``frame`` outwards (None when there is none)."""
    stack = user_stack(frame)
    if not stack:
        return None
    file, line, _ = stack[0]
    return f"{file}:{line}"


def call_sites(frame) -> tuple[str | None, str | None]:
    """(the user's line, the library's line beside it) of a call made from ``frame``."""
    return caller_location(frame), library_location(frame)


def past_mode_switches(frame, module):
    """The frame that asked ``module`` to switch mode: past the module's own ``train()``/``eval()`` overrides, so an
    evaluation's library line is the caller's (HF Trainer's ``model.eval()`` in trainer.py), not transformers'
    ``PreTrainedModel.train`` calling ``super().train(mode)`` (modeling_utils.py:4885 in the H100 capture)."""
    while frame is not None and frame.f_code.co_name in ("train", "eval") and frame.f_locals.get("self") is module:
        frame = frame.f_back
    return frame


def _wrapped(module, attribute: str, wrapper, original) -> None:
    wrapper._gpudiag_original = original
    setattr(module, attribute, wrapper)


class PeriodicWork:
    """The checkpoint and Module.train wrappers of one Runtime, and the evaluation spans still open."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._main_thread = threading.get_ident()
        self._save_depth = 0
        self._train_depth = 0
        self._open_evals: dict[int, tuple] = {}  # id(module) → (perf ns, unix ns, step, location, library, module)
        self._torch = None
        self._original_train = None
        self._wrapped: list[tuple[object, str, object]] = []  # (module, attribute, original) of each save wrapped
        self._import_hooks = []
        self._late: list[tuple[str, object]] = []  # (module, hook) of modules that were mid-import when torch came

    # ---- hooking
    def hook(self, torch) -> None:
        """Wrap ``torch.save`` and ``torch.nn.Module.train`` now, safetensors' and dcp's saves when they are
        imported; a torch without them is left alone."""
        if self._torch is not None:
            return
        self._torch = torch
        self._wrap_saves(torch, ("save",), CHECKPOINT_TORCH_SAVE)
        module_class = getattr(getattr(torch, "nn", None), "Module", None)
        train = module_class.__dict__.get("train") if module_class is not None else None
        if callable(train):
            _wrapped(module_class, "train", self._wrap_train(train), train)
            self._original_train = train
        self._when_imported(SAFETENSORS_MODULE, self._hook_safetensors)
        self._when_imported(DCP_SAVER_MODULE, self._hook_dcp)

    def _when_imported(self, name: str, hook) -> None:
        """``hook(module)`` now when ``name`` is imported, else right after its import; when it is being imported
        now (``import safetensors.torch`` before torch: it imports torch, whose hook lands here), at ``catch_up``."""
        module = sys.modules.get(name)
        if module is not None:
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                self._late.append((name, hook))
            else:
                hook(module)
            return
        from diagnose.launch.runtime.import_hooks import PostImportHook

        post_import = PostImportHook(name, hook)
        post_import.install()
        self._import_hooks.append(post_import)

    def catch_up(self) -> None:
        """At the first step boundary: wrap what was mid-import when torch was hooked (a name the script took from it
        before now, ``from safetensors.torch import save_file``, keeps the unwrapped function)."""
        late, self._late = self._late, []
        for name, hook in late:
            module = sys.modules.get(name)
            if module is not None:
                hook(module)

    def _hook_safetensors(self, module) -> None:
        if self._torch is not None:
            self._wrap_saves(module, SAFETENSORS_SAVES, CHECKPOINT_SAFETENSORS)

    def _hook_dcp(self, saver) -> None:
        """dcp's ``save``/``async_save`` in state_dict_saver, and in the package when it already took them from there
        (at the saver's import the package has not yet: it then takes the wrapped ones)."""
        if self._torch is None:
            return
        package = sys.modules.get(DCP_PACKAGE)
        originals = {name: getattr(saver, name, None) for name in DCP_SAVES}
        self._wrap_saves(saver, DCP_SAVES, CHECKPOINT_DISTRIBUTED)
        if package is not None:
            for name, original in originals.items():
                if original is not None and getattr(package, name, None) is original:
                    _wrapped(package, name, getattr(saver, name), original)
                    self._wrapped.append((package, name, original))

    def _wrap_saves(self, module, names, checkpoint_name: str) -> None:
        for name in names:
            original = getattr(module, name, None)
            if callable(original) and not hasattr(original, "_gpudiag_original"):
                _wrapped(module, name, self._wrap_save(original, checkpoint_name), original)
                self._wrapped.append((module, name, original))

    def unhook(self) -> None:
        """Put the originals back, unless someone wrapped them after us (then ours stays, harmless)."""
        torch, self._torch = self._torch, None
        train, self._original_train = self._original_train, None
        wrapped, self._wrapped = self._wrapped, []
        for post_import in self._import_hooks:
            post_import.remove()
        self._import_hooks = []
        self._open_evals.clear()
        try:
            self._pause_input(False)
        except Exception:  # noqa: BLE001 - the runtime is going away: nothing left to pause
            pass
        for module, name, original in wrapped:
            if getattr(getattr(module, name, None), "_gpudiag_original", None) is original:
                setattr(module, name, original)
        if torch is None:
            return
        module_class = torch.nn.Module
        if train is not None and getattr(module_class.__dict__.get("train"), "_gpudiag_original", None) is train:
            module_class.train = train

    # ---- the wrappers (the call itself always runs, unchanged, exactly once)
    def _wrap_save(self, original, checkpoint_name: str):
        work, get_ident, perf_ns = self, threading.get_ident, time.perf_counter_ns

        @functools.wraps(original)
        def save(*args, **kwargs):
            if work._save_depth or get_ident() != work._main_thread or work._runtime.disabled or work._torch is None:
                return original(*args, **kwargs)
            work._save_depth = 1
            t_ns, started_ns, step = time.time_ns(), perf_ns(), work._current_step()
            try:
                return original(*args, **kwargs)
            finally:
                work._save_depth = 0
                work._record(checkpoint_name, step, t_ns, perf_ns() - started_ns, sys._getframe(1))

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

    def _current_step(self):
        """The step in progress (None before the first boundary), or _NO_STEP when it cannot be read."""
        try:
            return self._runtime.steps.current_step
        except Exception as e:
            self._runtime.faults.internal_error("checkpoint record", e)
            return _NO_STEP

    def _pause_input(self, paused: bool) -> None:
        """Input wait and new shapes off while an evaluation runs: its DataLoader feeds no training step."""
        wait = getattr(self._runtime.steps, "input_wait", None)
        if wait is not None:
            wait.paused = paused
            wait.resume_check = self.end_restored_evaluations

    def end_restored_evaluations(self) -> None:
        """End the evaluations whose module is back in training mode though no train() call said so: Lightning's
        evaluation loop restores each submodule's ``training`` attribute directly (lightning 2.6, _ModuleMode), so
        the span would never close and input wait would stay paused for the rest of the run. Asked at the next
        DataLoader fetch (the training loop's next batch: the evaluation's end, within that call) or step boundary."""
        try:
            for key, span in list(self._open_evals.items()):
                if span[-1].training:
                    self._close(key)
        except Exception as e:
            self._runtime.faults.internal_error("evaluation span", e)
            self._open_evals.clear()
            self._pause_input(False)

    def _on_top_level_train(self, module, mode, caller) -> None:
        try:
            key = id(module)
            if not mode:
                if key not in self._open_evals:
                    step = self._runtime.steps.current_step
                    self._open_evals[key] = (
                        time.perf_counter_ns(),
                        time.time_ns(),
                        BEFORE_FIRST_STEP if step is None else step,
                        *call_sites(past_mode_switches(caller, module)),
                        module,
                    )
                    self._pause_input(True)
                return
            self._close(key)
        except Exception as e:
            self._runtime.faults.internal_error("evaluation span", e)

    def _close(self, key: int) -> None:
        """Write the evaluation record of the span open on module ``key`` (if any); un-pause input when none is left."""
        span = self._open_evals.pop(key, None)
        if span is None:
            return
        if not self._open_evals:
            self._pause_input(False)
        started_ns, t_ns, step, location, library, _ = span
        write_work(
            self._runtime,
            WORK_EVALUATION,
            step,
            t_ns,
            time.perf_counter_ns() - started_ns,
            location,
            **_library(library),
        )

    def _record(self, checkpoint_name: str, step, t_ns: int, elapsed_ns: int, caller) -> None:
        if step is _NO_STEP:
            return  # already reported to runtime.faults
        try:
            location, library = call_sites(caller)
            write_work(
                self._runtime,
                WORK_CHECKPOINT,
                step,
                t_ns,
                elapsed_ns,
                location,
                name=checkpoint_name,
                **_library(library),
            )
        except Exception as e:
            self._runtime.faults.internal_error("checkpoint record", e)


def _library(library_location: str | None) -> dict:
    """The optional ``library_location`` field: written only when there is one."""
    return {} if library_location is None else {"library_location": library_location}
