"""Exact source lines of synchronizing CUDA calls, inside the trace window only.

``torch.cuda.set_sync_debug_mode("warn")`` makes torch warn at every call that waits
for the GPU (``.item()``, ``.cpu()``, ``nonzero``, ``torch.cuda.synchronize`` ...).
While the window is open this module lets those warnings through the filters
("always", so none is deduplicated), takes them out of the normal warning output and
records the Python stack at that moment; the innermost *user* frame (the first one
outside torch, site-packages, the standard library and gpudiag) is the line to fix.
Everything is put back as it was when the window closes, and the captured syncs become
sync records (``sync_records``), paired with the profiler's own sync calls when they line up.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import time
import warnings

from parsers.run_records import SYNC, format_record

SYNC_WARNING = re.compile(r"synchroniz", re.IGNORECASE)
MAX_STACK_FRAMES = 16

_SOURCE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))  # holds diagnose/
_GPUDIAG_DIRS = tuple(os.path.join(_SOURCE_ROOT, d) + os.sep for d in ("diagnose", "parsers", "reports"))


def _library_prefixes() -> tuple[str, ...]:
    prefixes = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            path = sysconfig.get_paths()[key]
        except KeyError:
            continue
        prefixes.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(prefixes))


_LIBRARY_PREFIXES = _library_prefixes()
_STDLIB_PREFIXES = tuple(
    sorted({os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")})
)


def is_gpudiag_file(filename: str) -> bool:
    """True for gpudiag's own code (diagnose/, parsers/, reports/ of this checkout)."""
    return bool(filename) and os.path.abspath(filename).startswith(_GPUDIAG_DIRS)


def is_stdlib_file(filename: str) -> bool:
    """True for the standard library's own modules (not the site-packages folder inside it)."""
    if not filename:
        return False
    path = os.path.abspath(filename)
    if os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path:
        return False
    return path.startswith(_STDLIB_PREFIXES)


def is_user_file(filename: str) -> bool:
    """True for the user's own code: not torch/jax, not site-packages, not the stdlib, not gpudiag."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path:
        return False
    if path.startswith(_GPUDIAG_DIRS):
        return False
    return not path.startswith(_LIBRARY_PREFIXES)


FRAMEWORK_PACKAGES = ("torch", "jax", "jaxlib", "safetensors")


def _framework_dirs() -> tuple[str, ...]:
    dirs = []
    for name in FRAMEWORK_PACKAGES:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            dirs.append(os.path.dirname(os.path.abspath(file)) + os.sep)
    return tuple(dirs)


def library_location(frame) -> str | None:
    """``file:line`` of the innermost frame from ``frame`` outwards that is neither the framework's own (torch, jax,
    safetensors), the standard library's (contextlib, functools glue) nor gpudiag's, when it is not a user file: the
    library that made the call (None when the user did, or there is no such frame)."""
    skipped = _framework_dirs()
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename and not filename.startswith("<") and not is_gpudiag_file(filename) and not is_stdlib_file(filename):
            path = os.path.abspath(filename)
            if not path.startswith(skipped):
                return None if is_user_file(filename) else f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_stack(frame) -> list[tuple[str, int, str]]:
    """(file, line, function) from the innermost user frame outwards; [] when there is none."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    for i, (filename, _, _) in enumerate(frames):
        if is_user_file(filename):
            return [(os.path.abspath(f), line, fn) for f, line, fn in frames[i : i + MAX_STACK_FRAMES]]
    return []


def sync_record(
    rank: int,
    step: int,
    stack: list[tuple[str, int, str]],
    t_ns: int,
    op: str = "cuda_sync",
    dur_ns: int | None = None,
    library: str | None = None,
) -> bytes:
    """A sync record's line (parsers.run_records.SYNC): the innermost user frame's file, line and function, and
    ``library_location`` where a library's code made the call (the innermost frame outside torch/jax and gpudiag is
    not the user's: HF Trainer's per-step loss check beside the user's ``trainer.train()``)."""
    file, line, function = stack[0] if stack else (None, None, None)
    extra = {} if library is None else {"library_location": library}
    return format_record(
        SYNC,
        rank=rank,
        step=step,
        t_ns=t_ns,
        dur_ns=dur_ns,
        op=op,
        file=file,
        line=line,
        function=function,
        stack=[f"{f}:{n} {fn}" for f, n, fn in stack],
        **extra,
    )


def sync_records(rank: int, warned: list, profiler_syncs: list[dict], step_at):
    """The window's sync records' lines, one at a time. Each captured warning ``(t_ns, step, stack, library)`` gives one, with
    the op and wait of the profiler's sync at the same place when both lists have the same length (else
    ``cuda_sync``, no wait); without warnings, each of the profiler's syncs gives one, at ``step_at(t_ns)``."""
    if warned:
        paired = len(profiler_syncs) == len(warned)
        for i, (t_ns, step, stack, library) in enumerate(warned):
            found = profiler_syncs[i] if paired else None
            yield sync_record(
                rank,
                step,
                stack or (found["stack"] if found else []),
                t_ns,
                op=found["op"] if found else "cuda_sync",
                dur_ns=found["dur_ns"] if found else None,
                library=library,
            )
    else:
        for found in profiler_syncs:
            yield sync_record(
                rank, step_at(found["t_ns"]), found["stack"], found["t_ns"], op=found["op"], dur_ns=found["dur_ns"]
            )


class SyncWarningCapture:
    """Collects sync warnings (with stacks) between :meth:`start` and :meth:`stop`."""

    def __init__(self, step_of):
        self._step_of = step_of  # () -> the current step number
        self.captured: list[tuple[int, int, list, str | None]] = []  # (t_ns, step, stack, library_location)
        self._previous_showwarning = None
        self._filter = None
        self._torch = None
        self._previous_mode = None

    def start(self, torch=None) -> bool:
        """Turn sync debug mode on (when torch has it) and start capturing; False when unavailable."""
        self._previous_showwarning = warnings.showwarning
        warnings.showwarning = self._showwarning
        warnings.filterwarnings("always", message=".*synchroniz", category=UserWarning)
        self._filter = warnings.filters[0]
        if torch is not None:
            try:
                self._previous_mode = torch.cuda.get_sync_debug_mode()
                torch.cuda.set_sync_debug_mode("warn")
                self._torch = torch
            except Exception:
                self._torch = None
        return self._torch is not None

    def stop(self) -> None:
        if self._torch is not None:
            try:
                self._torch.cuda.set_sync_debug_mode(self._previous_mode or 0)
            except Exception:
                pass
            self._torch = None
        if self._previous_showwarning is not None:
            if warnings.showwarning == self._showwarning:
                warnings.showwarning = self._previous_showwarning
            self._previous_showwarning = None
        if self._filter is not None:
            try:
                warnings.filters.remove(self._filter)
                warnings._filters_mutated()
            except (ValueError, AttributeError):
                pass
            self._filter = None

    def _showwarning(self, message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and SYNC_WARNING.search(str(message)):
            try:
                frame = sys._getframe(1)
                self.captured.append((time.time_ns(), self._step_of(), user_stack(frame), library_location(frame)))
            except Exception:
                pass
            return
        previous = self._previous_showwarning or warnings._showwarning_orig
        previous(message, category, filename, lineno, file, line)
