"""The run folder's names and records, defined once for the writer inside the training process and every reader.

Three things live here (docs/run-folder.md describes them for people):

* the layout: where each artifact of a run folder lies (``manifest.json``, ``events/rank<N>.jsonl``, ...), as names
  and glob patterns;
* the records: every kind of line the runtime appends to a JSON-lines file (``step``, ``sync``, ``work``, the ``run``
  events, ``memory_stats``), each with its fields in the order they are written, and how a record becomes a line;
* the options a run ran with, read back from its manifest (:func:`run_options`): the trace window and the rest, so
  no analyzer reads the manifest's option paths itself.

Standard library only, and no import of another gpudiag module: the in-process runtime loads this file by its path
(diagnose/launch/runtime/__init__.py) inside the user's training process, where neither pandas nor the ``diagnose``
package may be imported.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass

# ---- the layout ------------------------------------------------------------------------------------------------------

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "gpudiag.run/1"
MANIFEST_SCHEMA_PREFIX = "gpudiag.run/"
NVML_CSV = "nvml.csv"
NCU_FOLDER = "ncu"
NCU_REPORT = f"{NCU_FOLDER}/report.ncu-rep"
NCU_RAW_CSV = f"{NCU_FOLDER}/raw.csv"
NCU_LOG = f"{NCU_FOLDER}/ncu.log"  # ncu's own console output
NCU_FIRST_LOG = f"{NCU_FOLDER}/ncu.step-window.log"  # ncu's log of the first run when --ncu ran the script again
NCU_LAUNCH_STARTS = f"{NCU_FOLDER}/launch_starts.csv"  # when each launch's profiling began (parsers.ncu_launch_starts)
NCU_PARTIAL_REPORT = f"{NCU_FOLDER}/report.partial.ncu-rep"  # what a killed ncu left: kept, never read as the report


@dataclass(frozen=True)
class RankFile:
    """An artifact each rank writes: ``<folder>/<stem><rank><suffix>``; ``read_suffix`` is what the loader also
    takes there (a trace someone put there as plain ``.json``)."""

    folder: str
    suffix: str
    stem: str = "rank"
    read_suffix: str | None = None

    def path(self, rank: int) -> str:
        """Rank ``rank``'s file, relative to the run folder."""
        return f"{self.folder}/{self.stem}{rank}{self.suffix}"

    @property
    def pattern(self) -> str:
        """Every rank's file, as a glob relative to the run folder."""
        return f"{self.folder}/{self.stem}*{self.suffix}"

    @property
    def read_pattern(self) -> str:
        """What the loader reads in this place, as a glob."""
        return f"{self.folder}/{self.stem}*{self.read_suffix or self.suffix}"

    @property
    def prefix(self) -> str:
        """The folder, as the start of a relative path (``trace/``)."""
        return f"{self.folder}/"

    def holds(self, relative: str) -> bool:
        """True when ``relative`` (a path in the run folder) is one rank's file of this kind."""
        return fnmatch.fnmatchcase(relative, self.pattern)


EVENTS = RankFile("events", ".jsonl")  # step, sync, work and run records
MEMORY_STATS = RankFile("memory", ".stats.jsonl")  # memory_stats records
SNAPSHOT = RankFile("memory", ".snapshot.json.gz", read_suffix=".snapshot.*")  # the allocator history
TRACE = RankFile("trace", ".json.gz", read_suffix=".json*")  # the profiler's trace of the window
JAX_TRACE = RankFile("trace", "", stem="jax-rank")  # jax.profiler's own output folder; gpudiag does not read it

APPENDED = (EVENTS, MEMORY_STATS)  # written line by line: a rank that stops early leaves them cut short
# every finished artifact the parent lists in the manifest
ARTIFACT_PATTERNS = (
    EVENTS.pattern,
    MEMORY_STATS.pattern,
    SNAPSHOT.pattern,
    TRACE.pattern,
    NVML_CSV,
    NCU_REPORT,
    NCU_RAW_CSV,
    NCU_LAUNCH_STARTS,
)
# what the loader reads, per rank, in this order
RANK_PATTERNS = (TRACE.read_pattern, SNAPSHOT.read_pattern, MEMORY_STATS.read_pattern, EVENTS.read_pattern)
_RANK_IN_PATH = re.compile(r"rank(\d+)\.")


def rank_in_path(relative: str) -> int | None:
    """The rank a run folder's artifact belongs to (``events/rank3.jsonl`` → 3), None for a run-wide one."""
    m = _RANK_IN_PATH.search(relative)
    return int(m.group(1)) if m else None


def is_appended(relative: str) -> bool:
    """True for a file written line by line (events, memory stats): one a stopped rank leaves cut short."""
    return any(f.holds(relative) for f in APPENDED)


# ---- the records -----------------------------------------------------------------------------------------------------


def kind_mark(kind: str) -> str:
    """How a line of ``kind`` says so in compact JSON (``"kind":"step"``): a cheap test of a line before parsing it."""
    return f'"kind":"{kind}"'


@dataclass(frozen=True)
class RecordKind:
    """One kind of JSON line: its ``kind`` (and ``event``, for a run record), the fields every record of it carries in
    the order they are written, the optional ones (written only where measured, or by other writers), and the file."""

    kind: str
    fields: tuple[str, ...]
    optional: tuple[str, ...] = ()
    event: str | None = None
    file: RankFile = EVENTS

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key a record of this kind may have, in the order written."""
        return ("kind",) + (("event",) if self.event else ()) + self.fields + self.optional

    @property
    def mark(self) -> str:
        """How a line of this kind says so in compact JSON (:func:`kind_mark`)."""
        return kind_mark(self.kind)

    def is_kind_of(self, record: dict) -> bool:
        """True when the parsed ``record`` is of this kind (and event)."""
        return record.get("kind") == self.kind and (self.event is None or record.get("event") == self.event)


RUN = "run"  # the kind of every run record; its "event" tells them apart

# how step_line writes each field of a step record, in the order written: ms to 6 decimals (the ns), µs to 3
_STEP_WRITTEN_AS = {
    "rank": "%d",
    "step": "%d",
    "t_start_ns": "%d",
    "host_ms": "%.6f",
    "gpu_ms": "%s",
    "source": '"%s"',
    "instrumented": "%s",
    "overhead_us": "%.3f",
}
# a step: the work between two step boundaries. input_ms (and input_from "loop") where the input wait was measured;
# name only from other writers (a region a user timed: docs/step-timings.md); backward_ms / optimizer_ms: the host
# time inside the step's outermost torch.autograd.backward calls / optimizer step() calls, where torch was hooked
# (every step while backward passes may end steps; once an optimizer or a marker defines them, the forward's timed
# steps only); forward_ms: the host time in its outermost nn.Module calls (forward_time), with them in the steps it
# timed (1 in 16; 1 in 8 before 2026-12-06);
# dispatch_ms, ready_ms, queued_ms: a JAX step's host time inside jax's call of the step function, the time from that
# call's start until its outputs were ready (the device's earlier work waited for first), and that wait for the
# previous step's outputs, in the steps jit_dispatch sampled (1 in 128); backward_passes: the outermost backward
# calls in the step where more than one (gradient accumulation's micro-batches), with the phases
STEP = RecordKind(
    "step",
    tuple(_STEP_WRITTEN_AS),
    optional=(
        "input_ms",
        "input_from",
        "name",
        "backward_ms",
        "optimizer_ms",
        "forward_ms",
        "backward_passes",
        "dispatch_ms",
        "ready_ms",
        "queued_ms",
    ),
)
# torch's profiler's own files: a sync whose Python stack passes through one is the profiler's (its stop's
# torch.cuda.synchronize(), under gpudiag's window close or a user's profile.__exit__), never the script's, and is
# no sync record. The trace's sync calls (diagnose/derive/trace_timeline.py) leave them out by the same rule.
PROFILER_FILES = ("torch/profiler/", "torch/autograd/profiler")


def is_profiler_file(text: str) -> bool:
    """True when ``text`` (a file name, or a stack line naming one) is in torch's profiler."""
    return any(p in text for p in PROFILER_FILES)


# a synchronizing call inside the trace window, with the user's line and stack
# library_location: the innermost frame outside torch/jax and gpudiag when it is a library's (the user's line is file:line)
SYNC = RecordKind(
    "sync",
    ("rank", "step", "t_ns", "dur_ns", "op", "file", "line", "function", "stack"),
    optional=("library_location",),
)
# work that ran between steps (or before the first one, step -1): a checkpoint, an evaluation span, a compile, the
# first batch of a new input shape, an import before the first step, gpudiag's own work (trace export, snapshot dump).
# library_location: the innermost frame when it is a library's, beside the user's line in location. A host-code
# record (the Python sampled in a long step) adds caller (the user line that called the function in name), share
# (of its samples in that function) and samples (how many were taken)
WORK = RecordKind(
    "work",
    ("what", "rank", "step", "t_ns", "ms", "location"),
    optional=(
        "name",
        "cudnn_benchmark",
        "library_location",
        "caller",
        "share",
        "samples",
        "ordinary_share",
        "sampled_ms",
        "run_queue_ms",
    ),
)
# the first line; install_ns: when the runtime was installed (just after interpreter start and the sitecustomize);
# main_cpu_ms, main_run_queue_ms: the main thread's time on a CPU and waiting for one so far (Linux's schedstat,
# diagnose/launch/runtime/cpu_wait.py; left out where unread); cpus_allowed, cpus: the CPUs the process may run on
# (its affinity) and the host's; threads: the process's threads then
RUN_START = RecordKind(
    RUN,
    ("rank", "world_size", "pid", "framework", "mode", "cuda", "versions", "t_ns"),
    optional=("install_ns", "main_cpu_ms", "main_run_queue_ms", "cpus_allowed", "cpus", "threads"),
    event="start",
)
# this process flushes what it holds and ends when sent ``signal`` (a real-time one): how gpudiag's ncu stopper ends it,
# since under ncu 2025.3 a script's own SIGTERM handler did not run (tools/ncu_signal_probe.py, H100 2026-12-06)
RUN_STOP_SIGNAL = RecordKind(RUN, ("rank", "pid", "signal", "t_ns"), event="stop-signal")
RUN_EXPECT = RecordKind(RUN, ("rank", "artifact", "t_ns"), event="expect")  # an artifact this rank will write
# the last line of a rank; main_cpu_ms, main_run_queue_ms: as in the start record, at the end; threads: the process's
RUN_END = RecordKind(
    RUN,
    ("rank", "reason", "steps", "written", "t_ns"),
    optional=("main_cpu_ms", "main_run_queue_ms", "threads"),
    event="end",
)
# from from_step on only one step in `every` is timed on the GPU, and why
GPU_TIME_EVERY = RecordKind(
    RUN, ("rank", "from_step", "every", "event_us", "step_host_ms", "budget_pct", "t_ns"), event="gpu-time-every"
)
NVTX = RecordKind(RUN, ("rank", "ranges", "backend", "why_not", "t_ns"), event="nvtx")  # whether steps carry ranges
# JAX without a marker: the jitted function chosen as the step (jit_steps) and the user's line that calls it, once
JIT_STEP = RecordKind(RUN, ("rank", "name", "location", "t_ns"), event="jit-step")
# torch: the user's line that calls a timed phase (backward, optimizer), once per site, from the phase's first calls
# (diagnose/launch/runtime/phase_sites.py): a trace names a module-level loop's frame by its file alone
PHASE_SITE = RecordKind(RUN, ("rank", "phase", "location", "function", "library_location", "t_ns"), event="phase-site")
PHASE_BACKWARD, PHASE_OPTIMIZER = "backward", "optimizer"
PHASE_SITE_PHASES = (PHASE_BACKWARD, PHASE_OPTIMIZER)
# a torch DataLoader's configuration, once per loader, at the first batch the loop takes from it
DATALOADER = RecordKind(
    RUN,
    ("rank", "step", "num_workers", "prefetch_factor", "batch_size", "persistent_workers", "dataset", "t_ns"),
    optional=("location",),
    event="dataloader",
)
MEMORY_STATS_RECORD = RecordKind(
    "memory_stats", ("rank", "step", "t_ns", "framework", "device", "stats"), file=MEMORY_STATS
)  # the allocator's statistics now and then

RECORD_KINDS = (
    STEP,
    SYNC,
    WORK,
    RUN_START,
    RUN_STOP_SIGNAL,
    RUN_EXPECT,
    RUN_END,
    GPU_TIME_EVERY,
    NVTX,
    JIT_STEP,
    PHASE_SITE,
    DATALOADER,
    MEMORY_STATS_RECORD,
)

STEP_NAME = "step"  # a step record's name when it times a whole step (other writers may time a named region)
STEP_SOURCES = ("marker", "optimizer", "backward", "jit", "time")  # what ended a step
INPUT_FROM_LOOP = "loop"  # input_ms is the loop's own wait on its iterator (else a DataLoader's __next__)
WORK_CHECKPOINT = "checkpoint"  # a torch.save, a safetensors save or a torch.distributed.checkpoint save
WORK_EVALUATION = "evaluation"  # model.eval() until the next model.train()
WORK_COMPILATION = "compilation"  # a JAX jit or torch.compile compile
WORK_NEW_SHAPE = "new-shape"  # the first DataLoader batch of a shape
WORK_IMPORT = "import"  # an outermost import statement before the first step (the short ones summed in one record)
WORK_GPUDIAG = "gpudiag"  # gpudiag's own work: the trace window's start and export, the allocator snapshot's dump
WORK_HOST_CODE = "host-code"  # the Python function most of a long step's samples were in (long_step_code)
WORK_WHATS = (
    WORK_CHECKPOINT,
    WORK_EVALUATION,
    WORK_COMPILATION,
    WORK_NEW_SHAPE,
    WORK_IMPORT,
    WORK_GPUDIAG,
    WORK_HOST_CODE,
)
# a checkpoint record's name: what saved it
CHECKPOINT_TORCH_SAVE = "torch.save"
CHECKPOINT_SAFETENSORS = "safetensors"
CHECKPOINT_DISTRIBUTED = "torch.distributed.checkpoint"
CHECKPOINT_NAMES = (CHECKPOINT_TORCH_SAVE, CHECKPOINT_SAFETENSORS, CHECKPOINT_DISTRIBUTED)
IMPORT_OTHERS = (
    "(other imports)"  # the import record that sums every outermost import shorter than IMPORT_RECORD_MIN_MS
)
IMPORT_RECORD_MIN_MS = 5.0  # an outermost import at least this long gets a record of its own
# a gpudiag record's name: which of gpudiag's own work it was
GPUDIAG_TRACE_START = "trace start"
GPUDIAG_TRACE_EXPORT = "trace export"
GPUDIAG_SNAPSHOT_DUMP = "snapshot dump"
GPUDIAG_NAMES = (GPUDIAG_TRACE_START, GPUDIAG_TRACE_EXPORT, GPUDIAG_SNAPSHOT_DUMP)
BEFORE_FIRST_STEP = -1  # the step of work done before the first step boundary
RUN_END_REASONS = ("exit", "context-exit")


def record(kind: RecordKind, **fields) -> dict:
    """A record of ``kind``, its keys in the order written; every field is required, an optional one is written when
    given. A field the kind does not declare is an error: no writer adds one this module does not know."""
    out = {"kind": kind.kind} if kind.event is None else {"kind": kind.kind, "event": kind.event}
    try:
        for name in kind.fields:
            out[name] = fields.pop(name)
    except KeyError as e:
        raise ValueError(f"a {kind.event or kind.kind} record needs {e.args[0]}") from None
    for name in kind.optional:
        if name in fields:
            out[name] = fields.pop(name)
    if fields:
        raise ValueError(f"a {kind.event or kind.kind} record has no field {', '.join(sorted(fields))}")
    return out


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)


def _clean(value):
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def json_line(value: dict) -> bytes:
    """``value`` as one compact JSON line, NaN/inf as null."""
    try:  # one reused encoder, no copy of the record (14 -> 8 µs a record on the dev CPU)
        text = _ENCODER.encode(value)
    except ValueError:  # NaN or inf somewhere: JSON has neither
        text = _ENCODER.encode(_clean(value))
    return (text + "\n").encode("utf-8")


def format_record(kind: RecordKind, **fields) -> bytes:
    """A record of ``kind`` as the line the runtime appends (:func:`record`, then :func:`json_line`)."""
    return json_line(record(kind, **fields))


_STEP_FORMAT = (
    "{" + ",".join([STEP.mark] + [f'"{name}":{written}' for name, written in _STEP_WRITTEN_AS.items()]) + "%s}\n"
)
_INPUT_MS = ',"input_ms":%.6f'
_INPUT_FROM_LOOP = f',"input_from":"{INPUT_FROM_LOOP}"'
_PHASES = ',"backward_ms":%.6f,"optimizer_ms":%.6f'
_FORWARD = ',"forward_ms":%.6f'
_PASSES = ',"backward_passes":%d'


def _sampled_fields(dispatch_ms: float, ready_ms: float | None, queued_ms: float | None) -> str:
    """A sampled JAX step's fields, as format_record writes them (ready_ms and queued_ms where measured)."""
    text = ',"dispatch_ms":%.6f' % dispatch_ms
    if ready_ms is not None:
        text += ',"ready_ms":%.6f' % ready_ms
    if queued_ms is not None:
        text += ',"queued_ms":%.6f' % queued_ms
    return text


_JIT_STEP_FORMAT = _STEP_FORMAT.replace('"gpu_ms":%s', '"gpu_ms":null').replace('"source":"%s"', '"source":"jit"')
_JIT_STEP_FORMAT = _JIT_STEP_FORMAT.replace('"instrumented":%s', '"instrumented":false')


def jit_step_line(
    rank: int, step: int, t_start_ns: int, host_ns: int, overhead_ns: int, input_ns: int | None = None, loop=False
) -> bytes:
    """The step record of a JAX step light mode timed in its jit steady state (no GPU time, not instrumented, not
    sampled), the bytes :func:`step_line` writes for it; ``input_ns`` where measured, from the loop's own iterator when
    ``loop``. Integer ns in, so every value is finite and nothing is checked: the drain formats one such step per
    step of a host-bound JAX loop, and step_line's checks were half of its 3.2 µs a record on the 2-core CPU host
    (2026-12-06)."""
    return (
        _JIT_STEP_FORMAT
        % (
            rank,
            step,
            t_start_ns,
            host_ns / 1e6,
            overhead_ns / 1e3,
            "" if input_ns is None else _INPUT_MS % (input_ns / 1e6) + (_INPUT_FROM_LOOP if loop else ""),
        )
    ).encode()


def jit_step_lines(rank: int, offset_ns: int, steps: list[tuple[int, int, int, int]]) -> list[bytes]:
    """:func:`jit_step_line` of each ``(step, start_perf_ns, end_perf_ns, overhead_ns)`` in ``steps``, with no input
    wait, in one pass: light mode's drain writes a run of such steps every 100 ms, one per step of a host-bound JAX
    loop (at 0.5 ms steps, 200 a drain). ``offset_ns`` turns perf_counter ns into wall-clock ns (t_start_ns)."""
    fmt = _JIT_STEP_FORMAT
    return [
        (fmt % (rank, step, start_ns + offset_ns, (end_ns - start_ns) / 1e6, overhead_ns / 1e3, "")).encode()
        for step, start_ns, end_ns, overhead_ns in steps
    ]


def step_line(
    rank: int,
    step: int,
    t_start_ns: int,
    host_ms: float,
    gpu_ms: float | None,
    source: str,
    instrumented: bool,
    overhead_us: float,
    input_ms: float | None = None,
    input_from: str | None = None,
    backward_ms: float | None = None,
    optimizer_ms: float | None = None,
    forward_ms: float | None = None,
    dispatch_ms: float | None = None,
    ready_ms: float | None = None,
    queued_ms: float | None = None,
    backward_passes: int | None = None,
) -> bytes:
    """A step record as one JSON line, the fields of :data:`STEP` in order: ms to 6 decimals (the ns), µs to 3.

    One %-format, built from :data:`STEP`'s fields, instead of :func:`format_record`, because this runs for every
    training step: on the H200 host writing ~40 step records took 440 µs with the encoder-equivalent formatting
    (2026-12-03), about 10 µs a step. ``input_ms`` (the DataLoader wait) is written only where it was measured
    (torch imported, and the step fetched a batch from a DataLoader, or on Python 3.12+ from the training loop's own
    ``for``: ``input_from`` "loop"). ``backward_ms`` and ``optimizer_ms`` are written together, where torch's backward
    and optimizers were hooked, ``forward_ms`` after them where the forward was timed too, ``backward_passes`` after
    that where the step made more than one outermost backward call (gradient accumulation). ``dispatch_ms``,
    ``ready_ms`` and ``queued_ms`` are a JAX step's that jit_dispatch sampled (one in 128), last. A source this
    module does not know or a value JSON cannot hold goes through :func:`format_record`, which writes the same
    record."""
    phases = backward_ms is not None and optimizer_ms is not None
    forward = phases and forward_ms is not None
    passes = phases and backward_passes is not None and backward_passes > 1
    sampled = dispatch_ms is not None
    if (
        source in STEP_SOURCES
        and math.isfinite(host_ms)
        and math.isfinite(overhead_us)
        and (gpu_ms is None or math.isfinite(gpu_ms))
        and (input_ms is None or math.isfinite(input_ms))
        and (not phases or (math.isfinite(backward_ms) and math.isfinite(optimizer_ms)))
        and (not forward or math.isfinite(forward_ms))
        and (not passes or isinstance(backward_passes, int))
        and (not sampled or all(v is None or math.isfinite(v) for v in (dispatch_ms, ready_ms, queued_ms)))
    ):
        return (
            _STEP_FORMAT
            % (
                rank,
                step,
                t_start_ns,
                host_ms,
                "null" if gpu_ms is None else "%.6f" % gpu_ms,
                source,
                "true" if instrumented else "false",
                overhead_us,
                (
                    ""
                    if input_ms is None
                    else _INPUT_MS % input_ms + (_INPUT_FROM_LOOP if input_from == INPUT_FROM_LOOP else "")
                )
                + (_PHASES % (backward_ms, optimizer_ms) if phases else "")
                + (_FORWARD % forward_ms if forward else "")
                + (_PASSES % backward_passes if passes else "")
                + (_sampled_fields(dispatch_ms, ready_ms, queued_ms) if sampled else ""),
            )
        ).encode()
    optional = {}
    if input_ms is not None:
        optional["input_ms"] = _rounded(input_ms, 6)
        if input_from == INPUT_FROM_LOOP:
            optional["input_from"] = INPUT_FROM_LOOP
    if phases:
        optional["backward_ms"] = _rounded(backward_ms, 6)
        optional["optimizer_ms"] = _rounded(optimizer_ms, 6)
    if forward:
        optional["forward_ms"] = _rounded(forward_ms, 6)
    if passes:
        optional["backward_passes"] = backward_passes
    if dispatch_ms is not None:
        optional["dispatch_ms"] = _rounded(dispatch_ms, 6)
        if ready_ms is not None:
            optional["ready_ms"] = _rounded(ready_ms, 6)
        if queued_ms is not None:
            optional["queued_ms"] = _rounded(queued_ms, 6)
    return format_record(
        STEP,
        rank=rank,
        step=step,
        t_start_ns=t_start_ns,
        host_ms=_rounded(host_ms, 6),
        gpu_ms=_rounded(gpu_ms, 6),
        source=source,
        instrumented=instrumented,
        overhead_us=_rounded(overhead_us, 3),
        **optional,
    )


def _rounded(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else value


# ---- the options a run ran with --------------------------------------------------------------------------------------

CHILD_OPTIONS = "child"  # manifest["options"][CHILD_OPTIONS]: the configuration the instrumented processes ran with


@dataclass(frozen=True)
class RunOptions:
    """What a run was asked to record, as its manifest's ``options`` says; None where it does not say (an input that
    is not a run folder says nothing). Field names are the child configuration's (diagnose/launch/child_config.py)."""

    mode: str | None = None  # light | ncu | in-process
    trace_start: int | None = None  # the first step of the profiler's trace window
    trace_steps: int | None = None  # steps in the window; 0: no trace
    snapshot_at: str | None = None  # "window", "exit" or a step number
    gpu_time_every: int | None = None  # 0: chosen by the runtime (gpu-time-every records)
    sync_debug: bool | None = None
    history_max_entries: int | None = None
    memory_stats_interval_ms: float | None = None
    nvml_hz: float | None = None  # None also when NVML sampling was off

    @property
    def trace_window(self) -> range | None:
        """The steps the profiler's trace window covered (sync records are captured only there), None without one."""
        start, count = self.trace_start, self.trace_steps
        if isinstance(start, int) and isinstance(count, int) and count > 0:
            return range(start, start + count)
        return None


def run_options(manifest: dict | None) -> RunOptions:
    """The options in a run's manifest (``options.child`` and the parent's own), each None where absent or not of
    its type."""
    options = (manifest or {}).get("options")
    options = options if isinstance(options, dict) else {}
    child = options.get(CHILD_OPTIONS)
    child = child if isinstance(child, dict) else {}

    def of(value, types):
        return value if isinstance(value, types) else None

    return RunOptions(
        mode=of(child.get("mode"), str),
        trace_start=of(child.get("trace_start"), int),
        trace_steps=of(child.get("trace_steps"), int),
        snapshot_at=of(child.get("snapshot_at"), str),
        gpu_time_every=of(child.get("gpu_time_every"), int),
        sync_debug=of(child.get("sync_debug"), bool),
        history_max_entries=of(child.get("history_max_entries"), int),
        memory_stats_interval_ms=of(child.get("memory_stats_interval_ms"), (int, float)),
        nvml_hz=of(options.get("nvml_hz"), (int, float)),
    )


def is_run_manifest(manifest: dict | None) -> bool:
    """True for the manifest of a run folder ``gpudiag profile`` (or ``diagnose.profile()``) wrote."""
    return str((manifest or {}).get("schema", "")).startswith(MANIFEST_SCHEMA_PREFIX)
