"""Input wait: the host time the training loop spends blocked in a torch DataLoader's ``__next__``.

Every torch DataLoader iterator (single- and multi-process) inherits ``__next__`` from
``_BaseDataLoaderIter``; one wrapper there sees every batch the loop asks for. It sums the wall time
of the outermost call on the main thread (a loader that iterates another loader is counted once),
and lets every exception, StopIteration included, through unchanged. It never reads the batch: after the
call it hands the batch to ``on_batch`` when given (new_shapes: its tensors' shapes, outside the timed span). The
step boundary reads ``total_ns`` and records the difference since the previous boundary as the
step's ``input_ms``: how long the step waited for its input. A step that asked no DataLoader for a batch
(a loop over a generator or any other iterable) gets no ``input_ms``: its wait is not measured here, not 0
(the trace window's steps measure it from their Python frames, diagnose/derive/trace_input_wait.py).

With ``loaders`` (dataloader_config.LoaderConfigs) the iterator's ``__init__`` is wrapped too, once per iterator,
to note its loader's configuration; an iterator's first batch then writes the loader's record. The per-batch path
pays one test of whether any configuration waits (an empty dict's truth value).
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time

_ITERATOR_MODULE = "torch.utils.data.dataloader"
_ITERATOR_CLASS = "_BaseDataLoaderIter"


def _nothing() -> None:
    return None


class InputWait:
    """Sums the time spent in DataLoader iterators' ``__next__`` on one thread."""

    def __init__(self, main_thread: int, on_batch=None, loaders=None):
        self.total_ns = 0  # wall time in outermost __next__ calls on the main thread, since hooked
        self.calls = 0  # those calls: a step that made none did not fetch from a DataLoader (its wait is unknown)
        self._main_thread = main_thread
        self._on_batch = on_batch  # called with each batch of an outermost call that returned one; never raises
        self._loaders = loaders  # dataloader_config.LoaderConfigs: each loader's configuration, at its first batch
        self._depth = 0
        self._iterator_class = None
        self._original = None
        self._original_init = None
        # True while an evaluation runs (periodic_work): its loader's batches are not the training loop's input
        # (no input wait, no new shape; HF Trainer's eval batches of 32 read as a new shape of a batch-16 loop)
        self.paused = False
        # asked while paused (at a fetch, at a step boundary): periodic_work ends an evaluation whose module is back
        # in training mode without a train() call, and un-pauses
        self.resume_check = _nothing

    def hook(self, torch) -> bool:
        """Wrap ``_BaseDataLoaderIter.__next__``; False when this torch has no such class (nothing hooked)."""
        if self._original is not None:
            return True
        iterator_class = getattr(importlib.import_module(_ITERATOR_MODULE), _ITERATOR_CLASS, None)
        original = getattr(iterator_class, "__next__", None)
        if original is None:
            return False
        wait, perf_ns, get_ident, on_batch = self, time.perf_counter_ns, threading.get_ident, self._on_batch
        main_thread = self._main_thread
        loaders = self._loaders
        pending = loaders.pending if loaders is not None else {}

        @functools.wraps(original)
        def __next__(iterator):  # every batch of the loop: the names it needs are its own (closure) variables
            if wait._depth or get_ident() != main_thread:
                return original(iterator)
            if wait.paused:
                wait.resume_check()  # the evaluation may have ended without train() (Lightning restores .training)
                if wait.paused:
                    return original(iterator)
            wait._depth = 1
            wait.calls += 1
            started_ns = perf_ns()
            try:
                batch = original(iterator)
            finally:
                wait.total_ns += perf_ns() - started_ns
                wait._depth = 0
            if pending:  # a loader's configuration waits for its first batch (dataloader_config)
                loaders.on_first_batch(iterator, time.time_ns() - (perf_ns() - started_ns), sys._getframe(1))
            if on_batch is not None:
                on_batch(batch)
            return batch

        __next__._gpudiag_original = original
        iterator_class.__next__ = __next__
        self._iterator_class, self._original = iterator_class, original
        init = iterator_class.__dict__.get("__init__")
        if loaders is not None and init is not None:

            @functools.wraps(init)
            def __init__(iterator, loader, *args, **kwargs):
                init(iterator, loader, *args, **kwargs)
                loaders.on_iterator(iterator, loader)  # never raises

            __init__._gpudiag_original = init
            iterator_class.__init__ = __init__
            self._original_init = init
        return True

    def unhook(self) -> None:
        """Put the original ``__next__`` back, unless someone wrapped it after us (then ours stays, harmless)."""
        iterator_class, original, init = self._iterator_class, self._original, self._original_init
        self._iterator_class = self._original = self._original_init = None
        if original is None:
            return
        current = iterator_class.__dict__.get("__next__")
        if getattr(current, "_gpudiag_original", None) is original:
            iterator_class.__next__ = original
        if init is not None and getattr(iterator_class.__dict__.get("__init__"), "_gpudiag_original", None) is init:
            iterator_class.__init__ = init
