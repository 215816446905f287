"""A torch DataLoader's configuration as a run record, once per loader, at the first batch the loop takes from it.

Input stalls that recur every ``num_workers`` steps mean the workers cannot keep up; saying so, with the fix, needs
the loader's ``num_workers``, ``prefetch_factor``, ``batch_size``, ``persistent_workers`` and dataset. input_wait
wraps the DataLoader iterator's ``__init__`` (once per iterator, which the loader hands itself to) and calls
``on_iterator``: a loader not yet recorded leaves its configuration in ``pending``, keyed by the iterator. At that
iterator's first batch on the main thread (outermost ``__next__``; the per-batch path only tests whether ``pending``
is empty) ``on_first_batch`` writes one ``{"kind": "run", "event": "dataloader"}`` record: the step in progress
(-1 before the first step boundary: then held by the runtime and written after the run's start record), when the
fetch began, and the innermost user frame that asked for it. The batch is never read; the loader's attributes are
read once per iterator. At most MAX_LOADERS loaders are recorded; ids are those of the loader objects.
"""

from __future__ import annotations

from diagnose.launch.runtime.periodic_work import caller_location
from parsers.run_records import BEFORE_FIRST_STEP, DATALOADER

MAX_LOADERS = 256  # loaders recorded; past them (a loader made per epoch, for ever) nothing more
MAX_PENDING = 256  # iterators made but not yet asked for a batch


def loader_fields(loader) -> dict:
    """The DATALOADER record's configuration fields of ``loader`` (a torch.utils.data.DataLoader)."""
    num_workers = int(getattr(loader, "num_workers", 0) or 0)
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:  # a batch_sampler given: its own batch size, when it has one
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    prefetch_factor = getattr(loader, "prefetch_factor", None) if num_workers > 0 else None
    return {
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor if isinstance(prefetch_factor, int) else None,
        "batch_size": batch_size if isinstance(batch_size, int) else None,
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "dataset": type(getattr(loader, "dataset", None)).__name__,
    }


class LoaderConfigs:
    """The DataLoaders one Runtime has recorded, and the configurations waiting for their first batch."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._recorded: set[int] = set()  # id(loader) of each loader recorded
        self.pending: dict[int, tuple[int, dict]] = {}  # id(iterator) → (id(loader), its fields)

    def on_iterator(self, iterator, loader) -> None:
        """A DataLoader iterator was made for ``loader``: its configuration waits for the first batch. Never raises."""
        try:
            key = id(loader)
            if key in self._recorded or len(self._recorded) >= MAX_LOADERS or self._runtime.disabled:
                return
            if len(self.pending) >= MAX_PENDING:
                self.pending.clear()  # iterators never asked for a batch: forget them
            self.pending[id(iterator)] = (key, loader_fields(loader))
        except Exception as e:
            self._runtime.faults.internal_error("dataloader record", e)

    def on_first_batch(self, iterator, t_ns: int, caller) -> None:
        """The main thread got a batch from ``iterator`` (its fetch began at ``t_ns``): the record, if it is the
        iterator's first and its loader's first. Never raises."""
        try:
            entry = self.pending.pop(id(iterator), None)
            if entry is None:
                return
            key, fields = entry
            if key in self._recorded:
                return
            self._recorded.add(key)
            step = self._runtime.steps.current_step
            self._runtime.write_record(
                DATALOADER,
                step=BEFORE_FIRST_STEP if step is None else step,
                t_ns=t_ns,
                location=caller_location(caller),
                **fields,
            )
        except Exception as e:
            self._runtime.faults.internal_error("dataloader record", e)
