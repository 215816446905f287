"""New input shapes as work records: the first batch of each shape a torch DataLoader gives the loop.

A step that meets an input shape for the first time is slow once: with ``torch.backends.cudnn.benchmark = True``
cuDNN times every convolution algorithm for the new shape, the caching allocator grows its pools, kernels for
the new sizes are chosen. The common case is the last, smaller batch of an epoch (DataLoader drop_last=False)
or images of varying sizes; without a record such a step reads as an unexplained slow step. One
``{"kind": "work", "what": "new-shape", "name": "(64, 3, 224, 224), (64,)", "cudnn_benchmark": true}``
record per distinct shape, written as it is seen (one write, like periodic_work's).

input_wait's ``__next__`` wrapper hands each batch of the main thread's outermost call here, after the call
returned. The signature reads only the ``.shape`` of the tensors in the batch, in a tuple, list or dict up to
two containers deep (never the tensors' data); anything else in the batch is ignored, and any error means no
signature. Its cost is a few isinstance checks and one set lookup per batch (docs/run-folder.md gives the
figure). The first ``MAX_SHAPES`` distinct signatures are remembered; past them nothing more is recorded
(shapes that vary at every batch are not a few slow steps, and the set must stay bounded).
"""

from __future__ import annotations

import time

from diagnose.launch.runtime.periodic_work import write_work
from parsers.run_records import WORK_NEW_SHAPE

MAX_SHAPES = 64  # distinct signatures remembered; past them nothing more is recorded
MAX_DEPTH = 2  # containers looked into: the batch's tuple/list/dict and the ones directly inside it
MAX_ITEMS = 32  # items looked at per container (a list of 10,000 tensors is not walked)


def signature_key(batch, tensor_type, depth: int = 0):
    """A hashable key of the batch's tensor shapes (``torch.Size`` kept as is), None when it holds no tensor.

    It runs for every batch: a container's tensors are read in the loop itself (no call for each), and no
    generator is made (1.45 → 0.65 µs for an ``[x, y]`` batch on the 2-core CPU host)."""
    if isinstance(batch, tensor_type):
        return batch.shape
    if depth >= MAX_DEPTH:
        return None
    if isinstance(batch, (tuple, list)):
        items = []
        found = False
        for item in batch[:MAX_ITEMS]:  # indexing, as a container class may define it (and refuse)
            if isinstance(item, tensor_type):
                key = item.shape
            else:
                key = signature_key(item, tensor_type, depth + 1)
                if key is None:
                    items.append(None)
                    continue
            found = True
            items.append(key)
        return ("[" if isinstance(batch, list) else "(", tuple(items)) if found else None
    if isinstance(batch, dict):
        items = []
        for n, (name, item) in enumerate(batch.items()):
            if n >= MAX_ITEMS:
                break
            key = item.shape if isinstance(item, tensor_type) else signature_key(item, tensor_type, depth + 1)
            if key is not None:
                items.append((str(name), key))
        return ("{", tuple(items)) if items else None
    return None


def shape_words(key, top: bool = True) -> str:
    """``(64, 3, 224, 224), (64,)`` of a (x, y) batch's key; a nested container in brackets, a dict's ``name: …``."""
    if not isinstance(key, tuple) or not key or key[0] not in ("(", "[", "{"):
        return str(tuple(key))  # a torch.Size
    opener, items = key
    if opener == "{":
        inner = ", ".join(f"{name}: {shape_words(item, False)}" for name, item in items)
        return inner if top else "{" + inner + "}"
    inner = ", ".join(shape_words(item, False) for item in items if item is not None)
    return inner if top else ("[" + inner + "]" if opener == "[" else "(" + inner + ")")


class NewShapes:
    """The input shapes one Runtime has seen, and the record of each new one."""

    def __init__(self, runtime, torch):
        self._runtime = runtime
        self._torch = torch
        self._tensor_type = torch.Tensor
        self._seen: set = set()
        self._full = False

    def on_batch(self, batch) -> None:
        """A batch the loop got from a DataLoader (main thread, outermost call): a record when its shape is new.

        The record names ``runtime.steps.current_step`` at the fetch. Step N is the work between boundary N and
        N+1, and a loop fetches its batch after the previous step's boundary (the optimizer step, or backward,
        or ``diagnose.step()`` at the end of the body): the fetch is in the step that trains on this batch, so
        the record names the step whose time the new shape costs. A batch fetched before the first boundary has
        no step: its shape is remembered (it is not new later) and not recorded."""
        if self._full or self._runtime.disabled:
            return
        try:
            key = signature_key(batch, self._tensor_type)
            if key is None or key in self._seen:
                return
        except Exception:
            return  # no signature: a batch gpudiag cannot read is not a reason to stop
        if len(self._seen) >= MAX_SHAPES:
            self._full = True
            self._seen.clear()
            return
        self._seen.add(key)
        try:
            self._write(key)
        except Exception as e:
            self._runtime.faults.internal_error("new-shape record", e)

    def _write(self, key) -> None:
        step = self._runtime.steps.current_step
        if step is None:
            return  # before the first boundary: remembered, not recorded (the run budget reads no new shape there)
        cudnn = getattr(self._torch.backends, "cudnn", None)
        write_work(
            self._runtime,
            WORK_NEW_SHAPE,
            step,
            time.time_ns(),
            0,
            None,
            name=shape_words(key),
            cudnn_benchmark=bool(getattr(cudnn, "benchmark", False)),
        )
