"""Per-step CUDA-event timings, exact-line sync records and periodic work records → typed tables.

Two sources (docs/step-timings.md describes both):

* ``events/rank<N>.jsonl`` written by ``gpudiag profile``: one JSON object a line,
  ``"kind"`` = ``step`` | ``sync`` | ``work`` | ``run`` (each kind and its fields are declared in
  :mod:`parsers.run_records`, which the runtime writes them with); other kinds are skipped so newer
  writers stay readable. A ``work`` record (a checkpoint save, an evaluation span, a compile, with the
  user's line, or the first batch of a new input shape) that cannot be read is dropped with a warning: it only names what ran in a slow
  step, and the step timings stay usable without it. Of the ``run`` records only the ``gpu-time-every`` ones are
  kept (``GpuTimeChoice``, in ``steps.attrs["gpu_time_choices"]``): when and why the
  runtime timed only one step in k, and against which budget; the ``dataloader`` ones (``DataLoaderConfig``, in
  ``steps.attrs["dataloaders"]``, a table through :func:`loaders_frame`): each torch DataLoader's configuration;
  and the ``start`` and ``end`` ones' times (``RunMarks``, in ``steps.attrs["run_marks"]``): when the process's
  runtime was installed, its first step boundary and its end. A run killed mid-write
  leaves a last line without its newline: it is dropped with a warning. Any other bad
  line is an error naming it.
* step timings a user wrote themselves: CSV with header ``name,step,elapsed_ms`` or
  ``name,step,start_ms,end_ms`` (optional ``rank``, ``host_ms``, ``t_start_ns``),
  or a JSON list of objects with the same keys. ``elapsed_ms`` is the GPU time
  (``cudaEventElapsedTime``) and lands in ``gpu_ms``.

Warnings (lines dropped) go through :mod:`warnings` and into ``steps.attrs["warnings"]``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import pandas as pd

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.reader import EVENTS, JSON, TEXT, Reader, compact_json, first_line
from parsers.run_records import (
    DATALOADER,
    GPU_TIME_EVERY,
    INPUT_FROM_LOOP,
    JIT_STEP,
    PHASE_SITE,
    PHASE_SITE_PHASES,
    RUN,
    RUN_END,
    RUN_START,
    STEP,
    STEP_NAME,
    STEP_SOURCES,
    SYNC,
    WORK,
    WORK_WHATS,
    kind_mark,
)
from parsers.schema import BOOL, F64, I64, STR, Schema, conform
from parsers.trace_stream import JSONDecodeError
from parsers.trace_stream import _loads as json_loads
from parsers.unicode_text import has_lone_surrogate

STEPS_SCHEMA = Schema(
    name="step_events",
    columns={
        "rank": I64,
        "step": I64,
        "name": STR,
        "t_start_ns": F64,
        "host_ms": F64,
        "gpu_ms": F64,
        "instrumented": BOOL,
        "overhead_us": F64,
        "input_ms": F64,
        "input_from": STR,
        "source": STR,
        "backward_ms": F64,
        "optimizer_ms": F64,
        "forward_ms": F64,
        "backward_passes": F64,
        "dispatch_ms": F64,
        "ready_ms": F64,
        "queued_ms": F64,
    },
    docs={
        "rank": "process rank (0 for a single process)",
        "step": "training step number as the script counts it",
        "name": "what was timed: 'step' for a whole step, else a region name the user chose",
        "t_start_ns": "step start, unix epoch ns (NaN when the source has only relative times)",
        "host_ms": "wall-clock time on the host from this step's start to the next's",
        "gpu_ms": "GPU time between the step's CUDA start and end events (cudaEventElapsedTime)",
        "instrumented": "the step ran inside gpudiag's profiler/sync-debug window (slower by design)",
        "overhead_us": "host time gpudiag's own step-boundary work took inside this step, µs "
        "(part of host_ms; NaN when the source does not record it)",
        "input_ms": "host time the loop spent waiting for its input during this step: blocked in torch DataLoader "
        "iterators' __next__, or (input_from 'loop') in the training loop's for statement waiting on its iterator "
        "(part of host_ms; NaN when not measured)",
        "input_from": "where input_ms was measured: 'dataloader' or 'loop' (empty when not measured)",
        "source": "what ended the step in light mode: marker | optimizer | backward | jit | time (fixed time "
        "slices, not iterations); empty for step timings from elsewhere",
        "backward_ms": "host time inside the step's outermost torch.autograd.backward calls (issuing the backward "
        "pass; part of host_ms; NaN when not measured: not a torch training loop, records before they had it, or, "
        "once an optimizer or diagnose.step() defines the steps, a step light mode did not time: it times the "
        "phases with the forward, one step in 16, since 2026-12-06)",
        "optimizer_ms": "host time inside the step's optimizer step() calls, every optimizer, less the closure a "
        "step() runs (part of host_ms; NaN when not measured: as backward_ms)",
        "forward_ms": "host time inside the step's outermost nn.Module calls on the main thread: the forward pass "
        "(part of host_ms; NaN when not measured: light mode times it in one step of 16, 8 before 2026-12-06)",
        "backward_passes": "outermost backward calls in the step where more than one (gradient accumulation's "
        "micro-batches: backward_ms and forward_ms hold them all); NaN for one, or where not measured",
        "dispatch_ms": "JAX: host time inside jax's call of the step function (part of host_ms; NaN except in the "
        "steps light mode sampled, one in 128)",
        "ready_ms": "JAX: time from that call's start until its outputs were ready, nothing of earlier steps left on "
        "the device when it began (the step's device work takes at most this); NaN elsewhere",
        "queued_ms": "JAX, in a sampled step: how long the previous step's outputs took to be ready from the call's "
        "start (0: they were; the device's lag behind the host); NaN elsewhere",
    },
)

SYNCS_SCHEMA = Schema(
    name="sync_records",
    columns={
        "rank": I64,
        "step": I64,
        "t_ns": F64,
        "dur_ns": F64,
        "op": STR,
        "file": STR,
        "line": F64,
        "function": STR,
        "location": STR,
        "stack": STR,
        "library_location": STR,
    },
    docs={
        "t_ns": "when the host began to wait, unix epoch ns",
        "dur_ns": "how long the host was blocked (NaN when not measured)",
        "op": "the op that synchronised (aten::item, cudaStreamSynchronize, …)",
        "file": "absolute path of the user's innermost frame",
        "line": "line number in that file (NaN when there was no user frame)",
        "function": "function of that frame",
        "location": "'file:line', the key sync findings group by",
        "stack": "tuple of 'file:line function', innermost user frame first",
        "library_location": "'file:line' of the library code that made the call, when it was not the user's (the "
        "innermost frame outside torch, jax and gpudiag: a Trainer's per-step check); empty otherwise",
    },
)


WORK_SCHEMA = Schema(
    name="work_records",
    columns={
        "rank": I64,
        "step": I64,
        "what": STR,
        "ms": F64,
        "location": STR,
        "t_ns": F64,
        "name": STR,
        "cudnn_benchmark": BOOL,
        "library_location": STR,
        "caller": STR,
        "share": F64,
        "samples": F64,
        "ordinary_share": F64,
        "sampled_ms": F64,
        "run_queue_ms": F64,
    },
    docs={
        "step": "the step in progress when the work began (its time is in that step's host_ms); -1 before the first "
        "step",
        "what": "'checkpoint' (torch.save, safetensors or torch.distributed.checkpoint), 'evaluation' "
        "(model.eval() until the next model.train()), 'compilation' (a JAX jit or torch.compile compile), "
        "'new-shape' (the first DataLoader batch of a shape), 'import' (an import before the first step), "
        "'gpudiag' (gpudiag's own work: trace start, trace export, snapshot dump) or 'host-code' (the Python "
        "function a long step's samples were in most: diagnose/launch/runtime/long_step_code.py)",
        "ms": "host wall time of the call or the span (host-code: the sampled time in that function, a lower bound)",
        "location": "'file:line' of the user's call (torch.save, model.eval(), an import); empty when no user frame",
        "t_ns": "when the work began, unix epoch ns",
        "name": "what was compiled ('jit(update)', 'torch.compile(forward)'), the new batch's tensor shapes "
        "('(64, 3, 224, 224), (64,)'), what saved the checkpoint ('torch.save', 'safetensors', "
        "'torch.distributed.checkpoint'), the module imported ('torch', '(other imports)') or gpudiag's work "
        "('trace export'); empty for other work",
        "cudnn_benchmark": "torch.backends.cudnn.benchmark when a new shape was seen (cuDNN re-tunes its "
        "convolutions for it); False for other work",
        "library_location": "'file:line' of the library frame that made the call when it is not the user's (HF "
        "Trainer's model.eval() beside the user's trainer.train() in location); empty otherwise",
        "caller": "host-code: 'file:line' of the user line that called the sampled function; empty otherwise",
        "share": "host-code: the share of the long step's samples in that function; NaN otherwise",
        "samples": "host-code: how many samples the long step took; NaN otherwise",
        "ordinary_share": "host-code: the share of the long step's samples at a line of the loop where ordinary "
        "steps were; NaN where too few ordinary steps were sampled, or otherwise",
        "sampled_ms": "host-code: how long the long step was sampled (from its first sample to its end); NaN otherwise",
        "run_queue_ms": "host-code: of that, the main thread's time runnable but given no CPU (Linux schedstat: a "
        "busy host); NaN where unread, or otherwise",
    },
)

LOADERS_SCHEMA = Schema(
    name="dataloaders",
    columns={
        "rank": I64,
        "step": I64,
        "num_workers": I64,
        "prefetch_factor": F64,
        "batch_size": F64,
        "persistent_workers": BOOL,
        "dataset": STR,
        "t_ns": F64,
        "location": STR,
    },
    docs={
        "step": "the step in progress at the loader's first batch; -1 before the first step",
        "num_workers": "the loader's worker processes (0: batches are made in the training process)",
        "prefetch_factor": "batches each worker loads ahead (NaN with no workers)",
        "batch_size": "samples a batch (NaN when the loader has none: a batch sampler without one)",
        "persistent_workers": "workers kept between epochs",
        "dataset": "the dataset's class name",
        "t_ns": "when the first batch's fetch began, unix epoch ns",
        "location": "'file:line' of the user's frame that asked for the first batch; empty when none",
    },
)


class EventTables(NamedTuple):
    """What one events file holds: the step timings, the sync records, the work records (typed, maybe empty)."""

    steps: pd.DataFrame
    syncs: pd.DataFrame
    work: pd.DataFrame


@dataclass(frozen=True)
class GpuTimeChoice:
    """A ``{"kind": "run", "event": "gpu-time-every"}`` record: from ``from_step`` on, rank ``rank`` timed one
    step in ``every`` on the GPU, because a CUDA event record cost ``event_us`` of host time against a
    ``step_host_ms`` step and its budget is ``budget_pct`` % of a step. Absent numbers are NaN.

    A tuple of these, sorted by (rank, from_step), is ``steps.attrs["gpu_time_choices"]``; empty when the
    runtime never chose (every step timed, a fixed --gpu-time-every, or not a gpudiag log). Frozen plain
    values, not a frame: pandas compares and copies ``attrs`` when it concatenates frames."""

    rank: int
    from_step: int
    every: int
    event_us: float
    step_host_ms: float
    budget_pct: float
    t_ns: float


@dataclass(frozen=True)
class DataLoaderConfig:
    """A ``{"kind": "run", "event": "dataloader"}`` record: one torch DataLoader's configuration, as rank ``rank``
    saw it at its first batch (``step``, -1 before the first step; ``t_ns``). Absent numbers are NaN; a tuple of
    these, in file order, is ``steps.attrs["dataloaders"]`` (plain values, like GpuTimeChoice)."""

    rank: int
    step: int
    num_workers: int
    prefetch_factor: float
    batch_size: float
    persistent_workers: bool
    dataset: str | None
    t_ns: float
    location: str | None


@dataclass(frozen=True)
class RunMarks:
    """When one rank's process installed gpudiag's runtime (``install_ns``, the run start record's; None in a log
    older than it), reached its first step boundary (``start_ns``, the start record's time) and flushed its end
    (``end_ns``, None when it never did: killed), unix ns. ``steps.attrs["run_marks"]``: a tuple of these, one per
    rank."""

    rank: int
    install_ns: int | None
    start_ns: int | None
    end_ns: int | None
    jit_step_name: str | None = None  # JAX: the jitted function chosen as the step, and where the loop calls it
    jit_step_location: str | None = None
    # the main thread's ms on a CPU and waiting for one (Linux's schedstat) at the first step and at the end
    main_cpu_ms_at_start: float | None = None
    main_run_queue_ms_at_start: float | None = None
    main_cpu_ms_at_end: float | None = None
    main_run_queue_ms_at_end: float | None = None
    cpus_allowed: int | None = None  # the CPUs the process could run on (its affinity), and the host's
    cpus: int | None = None
    threads: int | None = None  # the most threads the process had, at its first step or its end
    # torch: where the user's code calls each timed phase, (phase, "file:line", function, library "file:line" or
    # None), in the order first seen (PHASE_SITE records)
    phase_sites: tuple[tuple[str, str, str, str | None], ...] | None = None


INPUT_FROM_DATALOADER = "dataloader"  # input_from of a step whose input_ms is a DataLoader's __next__


def read_event_tables(path: str | os.PathLike) -> EventTables:
    """Read a gpudiag event log or a user step-timing CSV/JSON into its steps, syncs and work tables."""
    text = _read_text(path)
    body = text.lstrip("\ufeff").lstrip()
    if not body:
        raise InputError(
            path,
            "is empty; expected step timings (gpudiag events JSONL, or CSV/JSON "
            "with name,step,elapsed_ms — see docs/step-timings.md)",
        )
    choices: list[GpuTimeChoice] = []
    work: list[dict] = []
    run = _RunRecords()
    if body.startswith("["):
        steps, syncs, dropped = _user_records(path, _json_list(path, text), "entry"), [], []
    elif body.startswith("{"):
        steps, syncs, dropped, choices, work = _jsonl(path, text, run)
    else:
        rows, dropped = _csv_rows(path, text)
        steps, syncs = _user_records(path, rows, "line"), []
    steps_frame = _steps_frame(steps)
    syncs_frame = _syncs_frame(syncs)
    for message in dropped:
        warnings.warn(message, stacklevel=2)
    steps_frame.attrs["warnings"] = dropped
    steps_frame.attrs["gpu_time_choices"] = tuple(sorted(choices, key=lambda c: (c.rank, c.from_step)))
    steps_frame.attrs["dataloaders"] = tuple(run.loaders)
    steps_frame.attrs["run_marks"] = run.marks()
    return EventTables(steps_frame, syncs_frame, _work_frame(work))


def loaders_frame(configs) -> pd.DataFrame:
    """The DataLoaderConfig records (``steps.attrs["dataloaders"]`` of one or more ranks) as a LOADERS_SCHEMA table,
    by rank and time."""
    if not configs:
        return LOADERS_SCHEMA.empty()
    frame = pd.DataFrame.from_records([vars(c) for c in configs])
    frame = frame.sort_values(["rank", "t_ns"], kind="stable", na_position="last").reset_index(drop=True)
    return conform(frame, LOADERS_SCHEMA)


class _RunRecords:
    """What the run records of one events file say besides the GPU-time choices: the loaders and the run marks
    (with the JAX step function chosen, where there is one, and the lines that call torch's timed phases)."""

    def __init__(self):
        self.loaders: list[DataLoaderConfig] = []
        self._marks: dict[int, dict] = {}

    def add(self, record: dict) -> None:
        """Take ``record`` when it is a dataloader, jit-step, phase-site, start or end record (other run records are
        skipped). A malformed dataloader, jit-step or phase-site record raises ValueError; a start or end record's
        time that is not a whole number is None (a run is read without them)."""
        if DATALOADER.is_kind_of(record):
            self.loaders.append(_loader_config(record))
        elif JIT_STEP.is_kind_of(record):
            name, location = record.get("name"), record.get("location")
            if not (isinstance(name, str) and (location is None or isinstance(location, str))):
                raise ValueError(f"needs a name and a 'file:line' location, found {str(name)[:40]!r}")
            try:
                rank = _index(record, "rank", default=0)
            except ValueError:
                return
            marks = self._marks.setdefault(rank, {})
            marks["jit_step_name"], marks["jit_step_location"] = name, location
        elif PHASE_SITE.is_kind_of(record):
            site = _phase_site(record)
            try:
                rank = _index(record, "rank", default=0)
            except ValueError:
                return
            marks = self._marks.setdefault(rank, {})
            marks["phase_sites"] = (*(marks.get("phase_sites") or ()), site)
        elif RUN_START.is_kind_of(record) or RUN_END.is_kind_of(record):
            try:
                rank = _index(record, "rank", default=0)
            except ValueError:
                return
            marks = self._marks.setdefault(rank, {})
            edge = "start" if RUN_START.is_kind_of(record) else "end"
            marks[f"{edge}_ns"] = _ns_or_none(record, "t_ns")
            if edge == "start":
                marks["install_ns"] = _ns_or_none(record, "install_ns")
                marks["cpus_allowed"] = _positive_int_or_none(record, "cpus_allowed")
                marks["cpus"] = _positive_int_or_none(record, "cpus")
            threads = _positive_int_or_none(record, "threads")
            if threads is not None:
                marks["threads"] = max(threads, marks.get("threads") or 0)
            for key in ("main_cpu_ms", "main_run_queue_ms"):
                value = _ms_or_none(record, key)
                if value is not None:
                    marks[f"{key}_at_{edge}"] = value

    def marks(self) -> tuple[RunMarks, ...]:
        """One RunMarks per rank; a mark no record gave is None (every key of a rank's dict is a RunMarks field)."""
        names = [f.name for f in fields(RunMarks) if f.name != "rank"]
        return tuple(RunMarks(rank=rank, **{n: m.get(n) for n in names}) for rank, m in sorted(self._marks.items()))


def _phase_site(record: dict) -> tuple[str, str, str, str | None]:
    """A phase-site record's (phase, location, function, library_location); ValueError when one is not as written."""
    phase, location, function = record.get("phase"), record.get("location"), record.get("function")
    library = record.get("library_location")
    if phase not in PHASE_SITE_PHASES:
        raise ValueError(f"needs a phase of {', '.join(PHASE_SITE_PHASES)}, found {str(phase)[:40]!r}")
    if not (isinstance(location, str) and location.rpartition(":")[2].isdigit() and isinstance(function, str)):
        raise ValueError(f"needs a 'file:line' location and a function, found {str(location)[:60]!r}")
    if library is not None and not isinstance(library, str):
        raise ValueError(f"needs a library 'file:line' or null, found {str(library)[:40]!r}")
    return phase, location, function, library


# --- gpudiag's own JSONL -------------------------------------------------------------------------


def _lines(text: str) -> tuple[list[str], bool]:
    """Lines split on newlines only (a JSON string may hold other line separators); True when it ends in one."""
    lines = text.split("\n")
    ends_cleanly = lines[-1] == ""
    if ends_cleanly:
        lines.pop()
    return [line.rstrip("\r") for line in lines], ends_cleanly


def _jsonl(
    path, text: str, run: _RunRecords
) -> tuple[list[dict], list[dict], list[str], list[GpuTimeChoice], list[dict]]:
    lines, ends_cleanly = _lines(text)
    steps: list[dict] = []
    syncs: list[dict] = []
    work: list[dict] = []
    dropped: list[str] = []
    choices: list[GpuTimeChoice] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_loads(line)
        except JSONDecodeError as e:
            if number == len(lines) and not ends_cleanly:
                dropped.append(f"{os.fspath(path)}: line {number} is cut short (the run stopped mid-write); ignored")
                continue
            raise InputError(
                path, f"line {number}: expected one JSON object per line, found invalid JSON ({e})"
            ) from None
        if not isinstance(record, dict):
            raise InputError(path, f"line {number}: expected a JSON object, found {type(record).__name__}")
        kind = record.get("kind")
        if kind == WORK.kind:
            try:
                work.append(_work_record(record))
            except ValueError as e:
                dropped.append(f"{os.fspath(path)}: line {number}: work record not read ({e}); ignored")
            continue
        if kind == RUN and not GPU_TIME_EVERY.is_kind_of(record):
            try:
                run.add(record)  # dataloader, jit-step, phase-site, start, end; others are skipped
            except ValueError as e:
                dropped.append(
                    f"{os.fspath(path)}: line {number}: {record.get('event')} record not read ({e}); ignored"
                )
            continue
        try:
            if kind == STEP.kind:
                steps.append(_step_record(record))
            elif kind == SYNC.kind:
                syncs.append(_sync_record(record))
            elif GPU_TIME_EVERY.is_kind_of(record):
                choices.append(_gpu_time_choice(record))
            # kinds newer than this reader are skipped
        except ValueError as e:
            raise InputError(path, f"line {number}: {e}") from None
    if not steps and not syncs and not any(_is_record_line(line) for line in lines):
        raise InputError(
            path, f'has no complete event record; expected JSON lines with "kind": "{STEP.kind}" or "{SYNC.kind}"'
        )
    return steps, syncs, dropped, choices, work


def _is_record_line(line: str) -> bool:
    try:
        record = json_loads(line)
    except JSONDecodeError:
        return False
    return isinstance(record, dict) and "kind" in record


def _step_record(r: dict) -> dict:
    host_ms = _duration(r, "host_ms")
    gpu_ms = _duration(r, "gpu_ms")
    if math.isnan(host_ms) and math.isnan(gpu_ms):
        raise ValueError("a step record needs host_ms or gpu_ms; found neither")
    name = r.get("name", STEP_NAME)
    return {
        "rank": _index(r, "rank", default=0),
        "step": _index(r, "step"),
        "name": STEP_NAME if name is None else str(name),
        "t_start_ns": _number(r, "t_start_ns"),
        "host_ms": host_ms,
        "gpu_ms": gpu_ms,
        "instrumented": bool(r.get("instrumented", False)),
        "overhead_us": _duration(r, "overhead_us"),
        "input_ms": _duration(r, "input_ms"),
        "input_from": _input_from(r),
        "source": _source(r),
        "backward_ms": _duration(r, "backward_ms"),
        "optimizer_ms": _duration(r, "optimizer_ms"),
        "forward_ms": _duration(r, "forward_ms"),
        "backward_passes": _count(r, "backward_passes"),
        "dispatch_ms": _duration(r, "dispatch_ms"),
        "ready_ms": _duration(r, "ready_ms"),
        "queued_ms": _duration(r, "queued_ms"),
    }


def _input_from(r: dict) -> str:
    """'loop' as written, else 'dataloader' where input_ms was measured (records before 'input_from' existed)."""
    if r.get("input_ms") is None:
        return ""
    return INPUT_FROM_LOOP if r.get("input_from") == INPUT_FROM_LOOP else INPUT_FROM_DATALOADER


def _source(r: dict) -> str:
    source = r.get("source")
    return source if source in STEP_SOURCES else ""


def _gpu_time_choice(r: dict) -> GpuTimeChoice:
    every = _index(r, "every")
    if every < 1:
        raise ValueError(f"every should be a whole number ≥ 1, found {r.get('every')!r}")
    return GpuTimeChoice(
        rank=_index(r, "rank", default=0),
        from_step=_index(r, "from_step"),
        every=every,
        event_us=_duration(r, "event_us"),
        step_host_ms=_duration(r, "step_host_ms"),
        budget_pct=_duration(r, "budget_pct"),
        t_ns=_number(r, "t_ns"),
    )


def _loader_config(r: dict) -> DataLoaderConfig:
    location, dataset = r.get("location"), r.get("dataset")
    if location is not None and not isinstance(location, str):
        raise ValueError(f"location should be 'file:line', found {str(location)[:40]!r}")
    persistent = r.get("persistent_workers", False)
    if not isinstance(persistent, bool):
        raise ValueError(f"persistent_workers should be true or false, found {str(persistent)[:40]!r}")
    return DataLoaderConfig(
        rank=_index(r, "rank", default=0),
        step=_index(r, "step"),
        num_workers=_index(r, "num_workers", default=0),
        prefetch_factor=_duration(r, "prefetch_factor"),
        batch_size=_duration(r, "batch_size"),
        persistent_workers=persistent,
        dataset=None if dataset is None else str(dataset),
        t_ns=_number(r, "t_ns"),
        location=location or None,
    )


def _work_record(r: dict) -> dict:
    what, location = r.get("what"), r.get("location")
    if not isinstance(what, str) or not what:
        raise ValueError(f"needs what ({', '.join(WORK_WHATS)}), found {str(what)[:40]!r}")
    for key in ("location", "library_location"):
        value = r.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{key} should be 'file:line', found {str(value)[:40]!r}")
    name = r.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name should be the compiled function's name or a shape, found {str(name)[:40]!r}")
    cudnn_benchmark = r.get("cudnn_benchmark", False)
    if not isinstance(cudnn_benchmark, bool):
        raise ValueError(f"cudnn_benchmark should be true or false, found {str(cudnn_benchmark)[:40]!r}")
    ms = _duration(r, "ms")
    if math.isnan(ms):
        raise ValueError("needs ms, found none")
    caller = r.get("caller")
    if caller is not None and not isinstance(caller, str):
        raise ValueError(f"caller should be 'file:line', found {str(caller)[:40]!r}")
    share, ordinary_share = _share(r, "share"), _share(r, "ordinary_share")
    return {
        "rank": _index(r, "rank", default=0),
        "step": _index(r, "step"),
        "what": what,
        "ms": ms,
        "location": location or None,
        "t_ns": _number(r, "t_ns"),
        "name": name or None,
        "cudnn_benchmark": cudnn_benchmark,
        "library_location": r.get("library_location") or None,
        "caller": caller or None,
        "share": share,
        "samples": _duration(r, "samples"),
        "ordinary_share": ordinary_share,
        "sampled_ms": _duration(r, "sampled_ms"),
        "run_queue_ms": _duration(r, "run_queue_ms"),
    }


def _share(r: dict, key: str) -> float:
    """A record's share field: NaN when absent, else between 0 and 1."""
    value = _number(r, key)
    if not math.isnan(value) and not 0.0 <= value <= 1.0:
        raise ValueError(f"{key} should be between 0 and 1, found {r.get(key)!r}")
    return value


def _sync_record(r: dict) -> dict:
    file = r.get("file")
    line = _number(r, "line")
    if not math.isnan(line) and (line < 0 or line != int(line)):
        raise ValueError(f"line should be a source line number, found {r.get('line')!r}")
    stack = r.get("stack") or []
    if not isinstance(stack, list) or not all(isinstance(s, str) for s in stack):
        raise ValueError("stack should be a list of 'file:line function' strings")
    has_location = file is not None and not math.isnan(line)
    return {
        "rank": _index(r, "rank", default=0),
        "step": _index(r, "step", default=-1),
        "t_ns": _number(r, "t_ns"),
        "dur_ns": _duration(r, "dur_ns"),
        "op": None if r.get("op") is None else str(r["op"]),
        "file": None if file is None else str(file),
        "line": line,
        "function": None if r.get("function") is None else str(r["function"]),
        "location": f"{file}:{int(line)}" if has_location else None,
        "stack": tuple(stack),
        "library_location": None if r.get("library_location") is None else str(r["library_location"]),
    }


# --- the user format (CSV or JSON list) ----------------------------------------------------------


def _csv_rows(path, text: str) -> tuple[list[tuple[int, dict]], list[str]]:
    lines, ends_cleanly = _lines(text.lstrip("\ufeff"))
    header = [h.strip() for h in _cells(path, lines[0], 1)]
    _check_user_keys(path, header, "line 1: the CSV header")
    rows = []
    dropped = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = _cells(path, line, number)
        if len(cells) != len(header):
            if number == len(lines) and not ends_cleanly:
                dropped.append(f"{os.fspath(path)}: line {number} is cut short; ignored")
                continue
            raise InputError(
                path,
                f"line {number}: expected {len(header)} comma-separated values "
                f"({','.join(header)}), found {len(cells)}",
            )
        rows.append((number, {k: (v.strip() or None) for k, v in zip(header, cells)}))
    if not rows:
        raise InputError(path, "has a header but no step rows")
    return rows, dropped


def _cells(path, line: str, number: int) -> list[str]:
    try:
        return next(csv.reader([line]), [])
    except csv.Error as e:
        raise InputError(path, f"line {number}: not a CSV row ({e})") from None


def _json_list(path, text: str) -> list[tuple[int, dict]]:
    try:
        items = json.loads(text.lstrip("\ufeff"), parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise InputError(
            path, f"line {e.lineno}: expected a JSON list of step objects, found invalid JSON ({e.msg})"
        ) from None
    except ValueError as e:
        raise InputError(path, f"{e}") from None
    if not items:
        raise InputError(path, "is an empty JSON list; expected step objects with name, step, elapsed_ms")
    rows = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise InputError(
                path, f"entry {index}: expected an object with name, step, elapsed_ms, found {type(item).__name__}"
            )
        rows.append((index, item))
    _check_user_keys(path, list(items[0]), "entry 1")
    return rows


def _reject_constant(name: str):
    raise ValueError(f"expected finite numbers, found {name}")


def _check_user_keys(path, keys: list[str], where: str) -> None:
    has_elapsed = "elapsed_ms" in keys
    has_span = "start_ms" in keys and "end_ms" in keys
    missing = [k for k in ("name", "step") if k not in keys]
    if missing or not (has_elapsed or has_span):
        if not (has_elapsed or has_span):
            missing.append("elapsed_ms (or start_ms and end_ms)")
        raise InputError(
            path,
            f"{where} lacks {', '.join(missing)}; expected name,step,elapsed_ms or "
            f"name,step,start_ms,end_ms, found {','.join(map(str, keys))[:200]!r}",
        )


def _user_records(path, rows: list[tuple[int, dict]], label: str) -> list[dict]:
    out = []
    for number, row in rows:
        try:
            gpu_ms = _duration(row, "elapsed_ms")
            if math.isnan(gpu_ms) and ("start_ms" in row or "end_ms" in row):
                start, end = _number(row, "start_ms"), _number(row, "end_ms")
                if math.isnan(start) or math.isnan(end):
                    raise ValueError("start_ms and end_ms should both be numbers")
                if end < start:
                    raise ValueError(f"end_ms ({end}) is before start_ms ({start}); durations cannot be negative")
                gpu_ms = end - start
            host_ms = _duration(row, "host_ms")
            if math.isnan(gpu_ms):
                raise ValueError("elapsed_ms is missing")
            name = row.get("name")
            if name is None or str(name) == "":
                raise ValueError("name is empty")
            if has_lone_surrogate(str(name)):
                raise ValueError(f"name is not valid Unicode (a lone surrogate escape such as \\ud800): {name!a}")
            out.append(
                {
                    "rank": _index(row, "rank", default=0),
                    "step": _index(row, "step"),
                    "name": str(name),
                    "t_start_ns": _number(row, "t_start_ns"),
                    "host_ms": host_ms,
                    "gpu_ms": gpu_ms,
                }
            )
        except ValueError as e:
            raise InputError(path, f"{label} {number}: {e}") from None
    return out


# --- values ---------------------------------------------------------------------------------------


def _number(record: dict, key: str) -> float:
    """A finite number, NaN when absent/null; text that is not a number is an error."""
    value = record.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool):
        raise ValueError(f"{key} should be a number, found {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(str(value).strip())
        except ValueError:
            raise ValueError(f"{key} should be a number, found {str(value)[:40]!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{key} should be a finite number, found {value!r}")
    return number


def _ns_or_none(record: dict, key: str) -> int | None:
    """A time in unix ns as written (a whole number), None when absent or not one."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) else None


def _positive_int_or_none(record: dict, key: str) -> int | None:
    """A count ≥ 1 as written (a whole number), None when absent or not one: a run is read without it."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
        return None
    return value


def _ms_or_none(record: dict, key: str) -> float | None:
    """A duration as written (a number ≥ 0), None when absent or not one: a run is read without it."""
    try:
        value = _duration(record, key)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _duration(record: dict, key: str) -> float:
    number = _number(record, key)
    if number < 0:
        raise ValueError(f"{key} should be a duration ≥ 0, found {record.get(key)!r}")
    return number


def _count(record: dict, key: str) -> float:
    """A whole number ≥ 0, or NaN where absent."""
    number = _number(record, key)
    if not math.isnan(number) and (number != int(number) or number < 0):
        raise ValueError(f"{key} should be a whole number ≥ 0, found {str(record.get(key))[:40]!r}")
    return number


def _index(record: dict, key: str, default: int | None = None) -> int:
    if record.get(key) is None:
        if default is None:
            raise ValueError(f"{key} is missing")
        return default
    number = _number(record, key)
    # past 2**63 the number cannot be an int64 column (1e30 would overflow in conform, not be refused here)
    if number != int(number) or number < (-1 if key == "step" else 0) or number >= 2**63:
        raise ValueError(f"{key} should be a whole number ≥ 0, found {str(record.get(key))[:40]!r}")
    return int(number)


def _steps_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        return STEPS_SCHEMA.empty()
    frame = pd.DataFrame.from_records(records)
    frame = frame.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    return conform(frame, STEPS_SCHEMA)


def _syncs_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        return SYNCS_SCHEMA.empty()
    frame = pd.DataFrame.from_records(records)
    frame = frame.sort_values(["rank", "t_ns"], kind="stable", na_position="last").reset_index(drop=True)
    return conform(frame, SYNCS_SCHEMA)


def _work_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        return WORK_SCHEMA.empty()
    frame = pd.DataFrame.from_records(records)
    frame = frame.sort_values(["rank", "step", "t_ns"], kind="stable", na_position="last").reset_index(drop=True)
    return conform(frame, WORK_SCHEMA)


def _read_text(path) -> str:
    try:
        raw = read_input(path, lines=True, json=True, gunzip=False)  # within the caps of parsers/limits.py
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if b"\x00" in raw[:4096]:
        raise InputError(path, "is binary; expected step timings as JSON lines, CSV or JSON")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"is not UTF-8 text (byte {e.start}); expected step timings") from None


def is_events(head: bytes) -> bool:
    """gpudiag's event log (JSON lines of step / sync / work / run records), or a user's step timings as a
    JSON list or a CSV (docs/step-timings.md)."""
    compact = compact_json(head)
    if compact is None:
        line = first_line(head)
        return line.startswith("name,") or line.startswith("step,")
    if STEP.mark in compact or SYNC.mark in compact or kind_mark(RUN) in compact:
        return True
    return compact.startswith("[{") and '"step":' in compact and ('"elapsed_ms":' in compact or '"end_ms":' in compact)


READERS = (
    Reader(
        "events",
        EVENTS,
        is_events,
        read_event_tables,
        "a step-timing log (gpudiag's events JSON lines, or a JSON list or CSV of step timings)",
        (JSON, TEXT),
    ),
)
