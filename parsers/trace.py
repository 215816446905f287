"""PyTorch profiler (Kineto) and JAX perfetto traces → typed tables (:class:`Trace`).

One pass over the events sorts them into buckets by category; each bucket becomes
columns in bulk (numpy arrays, names as category codes), so a 1 GB trace never
exists as one list of Python objects (see :mod:`parsers.trace_stream`). Pieces are
decoded by msgspec into typed structs holding only the fields read here
(:mod:`parsers.trace_events`); a piece it does not take is read with orjson into
dicts, and both give the same columns. After the
pass the tables are linked: GPU work to the runtime call that launched it (the
CUPTI correlation id), runtime calls to the CPU op and the Python frame that
enclose them on their thread (:mod:`parsers.trace_nesting`), and each Python
frame to the nearest frame of the user's own code. Times are int64 ns
(``ts_ns``, ``dur_ns``, ``end_ns``); ids absent from the trace are -1.
Tables and columns are documented in ``docs/traces.md``.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.reader import JSON, TRACES, Reader, compact_json
from parsers.schema import BOOL, CAT, F64, I64, STR, Schema, conform
from parsers.trace_collectives import COLLECTIVES_SCHEMA, CollectiveArgs
from parsers.trace_events import EMPTY_ARGS, EventPiece, decode_events, to_dict
from parsers.trace_nesting import enclosing, nesting_order, parents, thread_key
from parsers.trace_stream import PieceBuilds, read_chunks

KINETO = "kineto"
PERFETTO = "perfetto"

_TIMES = {"ts_ns": I64, "dur_ns": I64, "end_ns": I64}

GPU_SCHEMA = Schema(
    "trace.gpu",
    {
        **_TIMES,
        "pid": I64,
        "tid": I64,
        "device": I64,
        "stream": I64,
        "correlation": I64,
        "external_id": I64,
        "name": CAT,
        "cat": CAT,
        "kind": CAT,
        "bytes": F64,
        "memcpy_kind": CAT,
        "host_memory": CAT,
        "runtime_index": I64,
    },
    {
        "kind": "compute | comm | memcpy | memset",
        "memcpy_kind": "HtoD | DtoH | DtoD | HtoH | PtoP",
        "host_memory": "pageable | pinned (host side of a HtoD/DtoH copy)",
        "runtime_index": "row in runtime of the call that launched it, or -1",
    },
)

RUNTIME_SCHEMA = Schema(
    "trace.runtime",
    {
        **_TIMES,
        "pid": I64,
        "tid": I64,
        "name": CAT,
        "cat": CAT,
        "correlation": I64,
        "external_id": I64,
        "sync_kind": CAT,
        "memcpy_kind": CAT,
        "host_memory": CAT,
        "gpu_index": I64,
        "cpu_op_index": I64,
        "python_index": I64,
    },
    {
        "sync_kind": "stream | event | device | memcpy | wait_event, when the call synchronises",
        "gpu_index": "row in gpu of the work it launched (first one), or -1",
        "cpu_op_index": "innermost enclosing cpu op, or -1",
        "python_index": "innermost enclosing Python frame, or -1",
    },
)

CUDA_SYNC_SCHEMA = Schema(
    "trace.cuda_sync", {**_TIMES, "device": I64, "stream": I64, "correlation": I64, "kind": CAT, "wait_on_stream": I64}
)

CPU_OP_SCHEMA = Schema(
    "trace.cpu_ops",
    {
        **_TIMES,
        "pid": I64,
        "tid": I64,
        "name": CAT,
        "external_id": I64,
        "sequence_number": I64,
        "parent_index": I64,
        "top_index": I64,
        "python_index": I64,
    },
    {
        "sequence_number": "the autograd node's sequence number (Kineto's 'Sequence number': a forward op's, and the "
        "backward op it became), -1 when absent",
        "parent_index": "enclosing cpu op",
        "top_index": "outermost enclosing cpu op (itself when top level)",
    },
)

PYTHON_SCHEMA = Schema(
    "trace.python",
    {
        **_TIMES,
        "pid": I64,
        "tid": I64,
        "name": CAT,
        "python_id": I64,
        "parent_index": I64,
        "file": CAT,
        "line": I64,
        "function": CAT,
        "is_user": BOOL,
        "user_index": I64,
    },
    {
        "line": "the function's FIRST line (Kineto names frames so), -1 when unknown",
        "user_index": "nearest frame at or above that is the user's own code, or -1",
    },
)

ANNOTATION_SCHEMA = Schema(
    "trace.annotations", {**_TIMES, "pid": I64, "tid": I64, "name": CAT, "cat": CAT, "step": F64}
)

FLOW_SCHEMA = Schema("trace.flows", {"ts_ns": I64, "pid": I64, "tid": I64, "id": I64, "ph": CAT, "cat": CAT})

OTHER_SCHEMA = Schema("trace.other", {**_TIMES, "pid": I64, "tid": I64, "name": CAT, "cat": CAT})

GPU_CATS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "Memset": "gpu_memset",
}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver", "runtime", "driver"}
CPU_OP_CATS = {"cpu_op", "Operator", "operator"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation"}
# categories Kineto writes that gpudiag does not need (not reported as unknown)
IGNORED_CATS = {
    "Trace",
    "overhead",
    "cuda_profiler_range",
    "python_function",
    "cpu_instant_event",
    "ac2g",
    "fwdbwd",
    "async_cpu_to_gpu",
    "gpu_mem_op",
    "mtia_ccp_events",
    "kernel_memcpy",
    "Trace Span",
}

SYNC_CALLS = {
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device",
    "cuCtxSynchronize": "device",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
    "cudaMemcpy": "memcpy",
    "cuMemcpyDtoH": "memcpy",
    "cuMemcpyDtoH_v2": "memcpy",
    "cuMemcpyHtoD_v2": "memcpy",
    "cudaStreamWaitEvent": "wait_event",
    "cuStreamWaitEvent": "wait_event",
}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
_PY_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GPU_PROCESS = re.compile(r"^/device:GPU:(\d+)")
_JAX_STREAM = re.compile(r"Stream #(\d+)")
_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|collective", re.I)
LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python3", "/lib64/python3")
LIBRARY_PACKAGES = {
    "torch",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "numpy",
    "triton",
    "transformers",
    "accelerate",
    "deepspeed",
    "lightning",
    "pytorch_lightning",
    "torchvision",
    "apex",
    "megatron",
    "nn.Module: ",
}


@dataclass
class Trace:
    """Every table of one profiler trace. Rows of one table refer to rows of another by index."""

    path: str
    format: str  # kineto | perfetto
    rank: int | None
    gpu: pd.DataFrame
    runtime: pd.DataFrame
    cuda_sync: pd.DataFrame
    cpu_ops: pd.DataFrame
    python: pd.DataFrame
    annotations: pd.DataFrame
    flows: pd.DataFrame
    other: pd.DataFrame
    device_properties: pd.DataFrame
    # what Kineto says of each collective (parsers.trace_collectives): op, process group, message size
    collectives: pd.DataFrame = field(default_factory=COLLECTIVES_SCHEMA.empty)
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def stack(self, python_index: int) -> list[str]:
        """The Python frames from ``python_index`` outwards, as Kineto names them."""
        out = []
        names, parent = self.python["name"], self.python["parent_index"].to_numpy()
        i = int(python_index)
        while i >= 0 and len(out) < 200:
            out.append(str(names.iat[i]))
            i = int(parent[i])
        return out


class _Columns:
    """Growing columns of one table: numpy pieces per chunk, names kept as codes."""

    def __init__(self):
        self.pieces: dict[str, list[np.ndarray]] = defaultdict(list)
        self.codes: dict[str, dict] = defaultdict(dict)

    def add(self, col: str, values: np.ndarray) -> None:
        self.pieces[col].append(values)

    def frame(self) -> pd.DataFrame:
        out = {}
        for col in list(self.pieces):
            parts = self.pieces.pop(col)  # each column's pieces are freed once joined: one copy at a time
            arr = np.concatenate(parts) if len(parts) > 1 else parts[0]
            del parts
            if col in self.codes:
                out[col] = _categorical(arr, list(self.codes[col]))
            else:
                out[col] = arr
        return pd.DataFrame(out, copy=False)  # one block per column: no second copy of the table


def _categorical(codes: np.ndarray, categories: list) -> pd.Categorical:
    cats = [None if c is None else str(c) for c in categories]
    if None in cats or len(set(cats)) != len(cats):
        return pd.Categorical(np.array(cats, dtype=object)[codes])
    return pd.Categorical.from_codes(codes, categories=cats)


class _Pending:
    """Columns of one bucket, committed to the table only once all of them were built."""

    def __init__(self):
        self.arrays: list[tuple[str, np.ndarray]] = []
        self.coded: list[tuple[str, list]] = []
        self.constants: list[tuple[str, Any, int]] = []

    def add(self, col: str, values: np.ndarray) -> None:
        self.arrays.append((col, values))

    def add_codes(self, col: str, values: list) -> None:
        self.coded.append((col, values))

    def add_constant(self, col: str, value, n: int) -> None:
        """Like ``add_codes(col, [value] * n)``."""
        self.constants.append((col, value, n))

    def commit(self, table: _Columns) -> None:
        coded = []
        for col, values in self.coded:
            index = table.codes[col]
            try:
                codes = [index.setdefault(v, len(index)) for v in values]
            except TypeError:  # a name (or kind) that is a JSON array or object: code it by its text
                codes = [index.setdefault(str(v) if v.__class__ in (list, dict) else v, len(index)) for v in values]
            coded.append((col, np.array(codes, dtype=np.int32)))
        for col, value, n in self.constants:
            coded.append((col, np.full(n, table.codes[col].setdefault(value, len(table.codes[col])), dtype=np.int32)))
        for col, values in self.arrays + coded:
            table.add(col, values)


class _Builder:
    """Receives chunks of events, keeps columns, counts what it skipped."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.tables = {
            k: _Columns() for k in ("gpu", "runtime", "cuda_sync", "cpu_ops", "python", "annotations", "flows", "other")
        }
        self.meta: list[dict] = []
        self.bad_duration = 0
        self.bad_events = 0
        self.unknown_cats: Counter = Counter()
        self.other_phases: Counter = Counter()
        self.n_events = 0
        self.collectives = CollectiveArgs()

    def on_events(self, events: list) -> None:
        if isinstance(events, EventPiece):
            self._on_structs(events)
            return
        self.n_events += len(events)
        buckets: dict[Any, list] = defaultdict(list)
        flows, meta = [], self.meta
        for e in events:
            if e.__class__ is not dict:
                self.bad_events += 1
                continue
            ph = e.get("ph")
            if ph == "X":
                cat = e.get("cat")
                if cat.__class__ in (list, dict):  # a JSON array/object is no category (and cannot key a bucket)
                    cat = str(cat)
                buckets[cat].append(e)
            elif ph == "s" or ph == "f" or ph == "t":
                flows.append(e)
            elif ph == "M":
                meta.append(e)
            else:
                self.other_phases[ph if ph.__class__ not in (list, dict) else str(ph)] += 1
        for cat, evs in buckets.items():
            try:
                self._bucket(cat, evs)
            except (TypeError, ValueError, AttributeError, OverflowError):
                good = [e for e in evs if _plausible(e)]
                self.bad_events += len(evs) - len(good)
                if good:
                    self._bucket(cat, good)
        if flows:
            try:
                self._flows(flows)
            except (TypeError, ValueError, AttributeError, OverflowError):
                self.bad_events += len(flows)

    def _times_of(self, ts: list, dur: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ts = _floats(ts)
        dur = _floats(dur)
        # beyond ±2**62 ns the int64 ns columns (and ts + dur) would wrap around: such times are not times
        ok = (dur >= 0) & (np.abs(ts) < _MAX_US) & (dur < _MAX_US)
        self.bad_duration += int(len(ts) - ok.sum())
        ts_ns = us_to_ns(ts[ok])
        dur_ns = us_to_ns(dur[ok])
        return ok, ts_ns, dur_ns, ts_ns + dur_ns

    def _table_of(self, cat, n: int) -> tuple[str, str | None]:
        """(table, gpu kind) of a category's events; counts unknown categories."""
        if cat in GPU_CATS:
            return "gpu", GPU_CATS[cat]
        if cat in RUNTIME_CATS:
            return "runtime", None
        if cat == "cuda_sync":
            return "cuda_sync", None
        if cat in CPU_OP_CATS:
            return "cpu_ops", None
        if cat == "python_function":
            return "python", None
        if cat in ANNOTATION_CATS:
            return "annotations", None
        if cat is not None and cat not in IGNORED_CATS:
            self.unknown_cats[str(cat)] += n
        return "other", None

    def _bucket(self, cat, evs: list) -> None:
        self._fill(cat, evs, _DICT_FIELDS)

    def _fill(self, cat, evs: list, fields: _Fields) -> None:
        """One category's events into their table's columns, through ``fields`` (dicts or typed structs)."""
        table, kind = self._table_of(cat, len(evs))
        ok, ts_ns, dur_ns, end_ns = self._times_of(fields.top(evs, "ts"), fields.top(evs, "dur"))
        if not ok.all():
            evs = [e for e, k in zip(evs, ok) if k]
        if not evs:
            return
        n = len(evs)
        t = _Pending()
        t.add("ts_ns", ts_ns)
        t.add("dur_ns", dur_ns)
        t.add("end_ns", end_ns)
        t.add("pid", _ints(fields.top(evs, "pid")))
        t.add("tid", _ints(fields.top(evs, "tid")))
        t.add_codes("name", fields.top(evs, "name"))
        if table in ("gpu", "runtime", "annotations", "other"):
            t.add_constant("cat", kind if table == "gpu" else cat, n)
        columns = ARG_COLUMNS.get(table)
        if columns:
            args = fields.args(evs)
            for column, key, attr, convert in columns:
                values = fields.arg(args, key, attr)
                if convert is None:
                    t.add_codes(column, values)
                else:
                    t.add(column, convert(values))
        t.commit(self.tables[table])
        if table == "cpu_ops" or (table == "gpu" and kind == "kernel"):
            fields.collectives(self.collectives, cat, evs)  # after the commit: a retried bucket is seen once

    def _flows(self, evs: list, fields: _Fields | None = None) -> None:
        fields = fields or _DICT_FIELDS
        ts = _floats(fields.top(evs, "ts"))
        ok = np.abs(ts) < _MAX_US
        if not ok.all():
            evs = [e for e, k in zip(evs, ok) if k]
            ts = ts[ok]
        t = _Pending()
        t.add("ts_ns", us_to_ns(ts))
        t.add("pid", _ints(fields.top(evs, "pid")))
        t.add("tid", _ints(fields.top(evs, "tid")))
        t.add("id", _ints(fields.top(evs, "id")))
        t.add_codes("ph", fields.top(evs, "ph"))
        t.add_codes("cat", fields.top(evs, "cat"))
        t.commit(self.tables["flows"])

    def merge(self, piece: _Builder | dict) -> None:
        """Append a piece built by its own builder (here, or in the helper as :meth:`to_plain` data), as if its
        events had come here.

        Names are coded per piece there; their codes become this builder's in the order the piece first
        met them, which is the order ``on_events`` would have given them, so the tables are the same.
        """
        if isinstance(piece, dict):
            piece = _Builder.from_plain(piece)
        self.n_events += piece.n_events
        self.bad_duration += piece.bad_duration
        self.bad_events += piece.bad_events
        self.unknown_cats.update(piece.unknown_cats)
        self.other_phases.update(piece.other_phases)
        self.meta.extend(piece.meta)
        self.collectives.rows.extend(piece.collectives.rows)
        for name, columns in piece.tables.items():
            table = self.tables[name]
            for col, parts in columns.pieces.items():
                if col in columns.codes:
                    index = table.codes[col]
                    local = columns.codes[col]
                    ours = np.fromiter(
                        (index.setdefault(v, len(index)) for v in local), dtype=np.int32, count=len(local)
                    )
                    parts = [ours[p] for p in parts]
                table.pieces[col].extend(parts)

    def to_plain(self) -> dict:
        """This builder as plain data (columns as dtype and bytearray), which the helper's pipe carries and the
        parent reads with a restricted unpickler that builds no object by name (parsers.restricted_pickle)."""
        return {
            "tables": {
                name: {
                    "pieces": {
                        c: [(a.dtype.str, bytearray(a.tobytes())) for a in parts] for c, parts in t.pieces.items()
                    },
                    "codes": {c: list(index) for c, index in t.codes.items()},
                }
                for name, t in self.tables.items()
            },
            "meta": self.meta,
            "counts": [self.n_events, self.bad_duration, self.bad_events],
            "unknown_cats": list(self.unknown_cats.items()),
            "other_phases": list(self.other_phases.items()),
            "collective_rows": self.collectives.rows,
        }

    @classmethod
    def from_plain(cls, plain: dict) -> _Builder:
        b = cls()
        for name, t in plain["tables"].items():
            table = b.tables[name]
            for c, parts in t["pieces"].items():
                table.pieces[c] = [np.frombuffer(data, dtype=np.dtype(dtype)) for dtype, data in parts]
            for c, keys in t["codes"].items():
                table.codes[c] = {k: i for i, k in enumerate(keys)}
        b.meta = plain["meta"]
        b.n_events, b.bad_duration, b.bad_events = plain["counts"]
        b.unknown_cats.update(dict(plain["unknown_cats"]))
        b.other_phases.update(dict(plain["other_phases"]))
        b.collectives.rows = plain["collective_rows"]
        return b

    # the typed fast path (parsers.trace_events): the same buckets and columns as the dict path above, for
    # pieces whose every kept field is well typed (str / int / float / None), so nothing here can fail on a value

    def _on_structs(self, events: EventPiece) -> None:
        self.n_events += len(events)
        buckets: dict[Any, list] = defaultdict(list)
        flows, meta, other = [], self.meta, self.other_phases
        for e in events:
            ph = e.ph
            if ph == "X":
                buckets[e.cat].append(e)
            elif ph == "s" or ph == "f" or ph == "t":
                flows.append(e)
            elif ph == "M":
                meta.append(to_dict(e))
            else:
                other[ph] += 1
        for cat, evs in buckets.items():
            self._fill(cat, evs, _STRUCT_FIELDS)
        if flows:
            self._flows(flows, _STRUCT_FIELDS)


_EMPTY: dict = {}


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (float) → int64 ns without the rounding of ``us * 1000`` past 2**53 (unix-epoch µs)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _plausible(e: dict) -> bool:
    args = e.get("args")
    return (
        isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur", 0), (int, float))
        and (args is None or isinstance(args, dict))
    )


_EXACT = 2**53  # integers up to here are the same through float64, which the general path goes by


def _ints(values: list) -> np.ndarray:
    """Ids as int64, -1 where absent or not a number (Kineto writes pid "Spans" for its own spans)."""
    try:  # the usual case, all ints: straight to int64, 3x faster than through float64 and the same numbers
        arr = np.array(values, dtype=np.int64)
        if arr.ndim == 1 and ((arr >= -_EXACT) & (arr <= _EXACT)).all():
            return arr
    except (TypeError, ValueError, OverflowError):
        pass
    arr = _numbers(values)
    arr[~(np.abs(arr) < 2.0**63)] = -1  # NaN, ±inf and what int64 cannot hold
    return arr.astype(np.int64)


_MAX_US = 2.0**62 / 1000  # times (µs) whose int64 ns and ts + dur stay in range


def _floats(values: list) -> np.ndarray:
    """One float per event (NaN where absent). A value that is a list, even of one number, is a ValueError:
    numpy would otherwise make a 2-D array of a whole chunk whose every ts is ``[x]`` (found by fuzzing)."""
    arr = np.array(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("expected one number per event")
    return arr


def _numbers(values: list) -> np.ndarray:
    """Floats, NaN where a value is absent or not a number (text, a list, a bool, an int beyond float)."""
    try:
        return _floats(values)
    except (TypeError, ValueError, OverflowError):
        return np.array([_number(v) for v in values], dtype=np.float64)


def _number(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return np.nan
    try:
        return float(v)
    except OverflowError:
        return np.nan


# The columns each table takes from an event's args: (column, Kineto's key, the attribute of
# parsers.trace_events' typed args, how to convert: _ints / _numbers, or None for names kept as codes).
# One list for the dict path and the typed fast path, so both make the same tables.
ARG_COLUMNS: dict[str, tuple[tuple[str, str, str, Any], ...]] = {
    "gpu": (
        ("device", "device", "device", _ints),
        ("stream", "stream", "stream", _ints),
        ("correlation", "correlation", "correlation", _ints),
        ("external_id", "External id", "external_id", _ints),
        ("bytes", "bytes", "bytes", _numbers),
    ),
    "runtime": (
        ("correlation", "correlation", "correlation", _ints),
        ("external_id", "External id", "external_id", _ints),
    ),
    "cuda_sync": (
        ("device", "device", "device", _ints),
        ("stream", "stream", "stream", _ints),
        ("correlation", "correlation", "correlation", _ints),
        ("kind", "cuda_sync_kind", "cuda_sync_kind", None),
        ("wait_on_stream", "wait_on_stream", "wait_on_stream", _ints),
    ),
    "cpu_ops": (
        ("external_id", "External id", "external_id", _ints),
        ("sequence_number", "Sequence number", "sequence_number", _ints),
    ),
    "python": (
        ("python_id", "Python id", "python_id", _ints),
        ("parent_id", "Python parent id", "python_parent_id", _ints),
    ),
    # JAX/XLA's perfetto traces: every event is "other" until _from_perfetto sorts them; a device op and the host
    # call that launched it (cuLaunchKernel, cuGraphLaunch for all of a command buffer's kernels) share this id
    "other": (("correlation", "correlation_id", "correlation_id", lambda v: _ints(_digits_as_ints(v))),),
}


def _digits_as_ints(values: list) -> list:
    """XLA writes ids as text ("17"): as ints, other values as they are (_ints makes them -1)."""
    return [int(v) if isinstance(v, str) and v.isdigit() else v for v in values]


class _Fields:
    """How the builder reads events of one kind: orjson's dicts or parsers.trace_events' typed structs."""

    def __init__(self, top, args, arg, collectives):
        self.top, self.args, self.arg, self.collectives = top, args, arg, collectives


_DICT_FIELDS = _Fields(
    top=lambda evs, name: [e.get(name) for e in evs],
    args=lambda evs: [e.get("args") or _EMPTY for e in evs],
    arg=lambda args, key, attr: [a.get(key) for a in args],
    collectives=lambda found, cat, evs: found.on_events(evs),
)
# Typed structs are read by plain comprehensions, one per field: twice as fast as map(attrgetter(...)) or
# getattr on the 1 GB trace's 5.4 M events (this path is the one the speed target is met on).
_STRUCT_TOP = {
    "ts": lambda evs: [e.ts for e in evs],
    "dur": lambda evs: [e.dur for e in evs],
    "pid": lambda evs: [e.pid for e in evs],
    "tid": lambda evs: [e.tid for e in evs],
    "name": lambda evs: [e.name for e in evs],
    "id": lambda evs: [e.id for e in evs],
    "ph": lambda evs: [e.ph for e in evs],
    "cat": lambda evs: [e.cat for e in evs],
}
_STRUCT_ARGS = {
    "device": lambda args: [a.device for a in args],
    "stream": lambda args: [a.stream for a in args],
    "correlation": lambda args: [a.correlation for a in args],
    "external_id": lambda args: [a.external_id for a in args],
    "sequence_number": lambda args: [a.sequence_number for a in args],
    "bytes": lambda args: [a.bytes for a in args],
    "cuda_sync_kind": lambda args: [a.cuda_sync_kind for a in args],
    "wait_on_stream": lambda args: [a.wait_on_stream for a in args],
    "python_id": lambda args: [a.python_id for a in args],
    "python_parent_id": lambda args: [a.python_parent_id for a in args],
    "correlation_id": lambda args: [a.correlation_id for a in args],
}
_STRUCT_FIELDS = _Fields(
    top=lambda evs, name: _STRUCT_TOP[name](evs),
    args=lambda evs: [e.args or EMPTY_ARGS for e in evs],
    arg=lambda args, key, attr: _STRUCT_ARGS[attr](args),
    collectives=lambda found, cat, evs: found.on_structs(cat, evs),
)


def _piece_of(events: list) -> _Builder:
    piece = _Builder()
    piece.on_events(events)
    return piece


def _build_piece(raw: bytes) -> dict | None:
    """A piece's columns, built in the helper process (``parsers.piece_helper``) and sent back as plain data;
    None if msgspec declines the piece."""
    events = decode_events(raw)
    return None if events is None else _piece_of(events).to_plain()


def read_trace(path: str | os.PathLike) -> Trace:
    """Read a Kineto ``.json``/``.json.gz`` or JAX ``*.trace.json.gz`` into a :class:`Trace`."""
    path = os.fspath(path)
    b = _Builder()
    header = read_chunks(
        path, b.on_events, b.reset, decode=decode_events, pieces=PieceBuilds(_build_piece, _piece_of, b.merge)
    )
    if not isinstance(header, dict):
        header = {}
    if b.n_events == 0 and not header:
        raise InputError(path, "expected a chrome trace with 'traceEvents'; found an empty event list and no metadata")
    frames = {}
    for k, t in b.tables.items():
        _return_free_memory()  # what the parsed pieces held, then each table's pieces once joined
        frames[k] = t.frame() if t.pieces else pd.DataFrame()
    _return_free_memory()
    procs, threads = _metadata_names(b.meta)
    fmt = (
        PERFETTO if any(_GPU_PROCESS.match(n or "") for n in procs.values()) and not frames["gpu"].shape[0] else KINETO
    )
    warnings = _warnings(b)
    if fmt == PERFETTO:
        frames = _from_perfetto(frames, procs, threads)
    trace = Trace(
        path=path,
        format=fmt,
        rank=_rank(header),
        gpu=_gpu(frames["gpu"]),
        runtime=_conformed(frames["runtime"], RUNTIME_SCHEMA),
        cuda_sync=_conformed(frames["cuda_sync"], CUDA_SYNC_SCHEMA),
        cpu_ops=_conformed(frames["cpu_ops"], CPU_OP_SCHEMA),
        python=_python(frames["python"], names_are_base_names=fmt == PERFETTO),
        annotations=_annotations(frames["annotations"]),
        flows=_conformed(frames["flows"], FLOW_SCHEMA),
        other=_conformed(frames["other"], OTHER_SCHEMA),
        device_properties=_device_properties(header),
        collectives=b.collectives.frame(),
        metadata={
            "header": {k: v for k, v in header.items() if k not in ("deviceProperties",)},
            "process_names": procs,
            "events": b.n_events,
        },
        warnings=warnings,
    )
    del frames, b  # the unsorted tables _gpu() and the others copied from
    _link(trace)
    return trace


def trace_from_tables(
    path: str | os.PathLike,
    fmt: str,
    *,
    gpu: pd.DataFrame,
    runtime: pd.DataFrame,
    cuda_sync: pd.DataFrame | None = None,
    annotations: pd.DataFrame | None = None,
    other: pd.DataFrame | None = None,
    device_properties: pd.DataFrame | None = None,
    rank: int | None = None,
    metadata: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> Trace:
    """A :class:`Trace` from another format's raw tables, finished and linked as :func:`read_trace` does.

    For a reader of another trace format (e.g. :mod:`parsers.nsys_sqlite`). ``gpu`` rows carry ``ts_ns, dur_ns,
    end_ns, pid, tid, device, stream, correlation, name`` and ``cat`` (``kernel`` | ``gpu_memcpy`` | ``gpu_memset``);
    ``kind``, ``memcpy_kind`` and ``host_memory`` come from them as for Kineto (a copy named like
    ``Memcpy HtoD (Pageable -> Device)``). ``runtime`` rows carry ``ts_ns, dur_ns, end_ns, pid, tid, name, cat,
    correlation``; annotations named ``ProfilerStep#N`` get their step. GPU work is linked to its launch call by
    correlation id, and a call's ``sync_kind`` comes from its name (:data:`SYNC_CALLS`). Extra columns are kept.
    """
    empty = pd.DataFrame()
    trace = Trace(
        path=os.fspath(path),
        format=fmt,
        rank=rank,
        gpu=_gpu(gpu),
        runtime=conform(runtime, RUNTIME_SCHEMA),
        cuda_sync=conform(empty if cuda_sync is None else cuda_sync, CUDA_SYNC_SCHEMA),
        cpu_ops=CPU_OP_SCHEMA.empty(),
        python=_python(empty),
        annotations=_annotations(empty if annotations is None else annotations),
        flows=FLOW_SCHEMA.empty(),
        other=conform(empty if other is None else other, OTHER_SCHEMA),
        device_properties=_device_properties({}) if device_properties is None else device_properties,
        metadata=dict(metadata or {}),
        warnings=list(warnings or []),
    )
    _link(trace)
    return trace


def _warnings(b: _Builder) -> list[str]:
    out = []
    if b.bad_duration:
        out.append(
            f"{b.bad_duration:,} complete events had a missing or negative duration (or a time beyond "
            f"what int64 nanoseconds hold) and were skipped"
        )
    if b.bad_events:
        out.append(
            f"{b.bad_events:,} events were not well-formed (not an object, or non-numeric ts/dur/args) and were skipped"
        )
    if b.unknown_cats:
        listed = ", ".join(f"{c!r} ({n:,})" for c, n in b.unknown_cats.most_common(8))
        out.append(f"events of unknown categories were kept in trace.other, not analysed: {listed}")
    return out


def _metadata_names(meta: list[dict]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    procs, threads = {}, {}
    for e in meta:
        args = e.get("args")
        if not isinstance(args, dict):
            continue
        name = args.get("name")
        pid, tid = e.get("pid"), e.get("tid")
        if not isinstance(pid, int):
            continue
        if e.get("name") == "process_name":
            procs[pid] = str(name)
        elif e.get("name") == "thread_name" and isinstance(tid, int):
            threads[(pid, tid)] = str(name)
    return procs, threads


def _from_perfetto(frames: dict, procs: dict, threads: dict) -> dict:
    """JAX: GPU work sits on processes named /device:GPU:N, one thread per "Stream #K(...)" line."""
    other = frames["other"]
    if not len(other):
        return frames
    gpu_pids = {pid: int(m.group(1)) for pid, n in procs.items() if (m := _GPU_PROCESS.match(n))}
    stream_of = {}
    for (pid, tid), n in threads.items():
        m = _JAX_STREAM.search(n)
        if pid in gpu_pids and m:
            stream_of[(pid, tid)] = int(m.group(1))
    pid, tid = other["pid"].to_numpy(), other["tid"].to_numpy()
    keys = list(zip(pid.tolist(), tid.tolist()))
    stream = np.array([stream_of.get(k, -1) for k in keys], dtype=np.int64)
    on_gpu = stream >= 0
    gpu = other[on_gpu].reset_index(drop=True).copy()
    gpu["stream"] = stream[on_gpu]
    gpu["device"] = [gpu_pids[p] for p in gpu["pid"]]
    names = gpu["name"].astype(str)
    lower = names.str.lower()
    gpu["cat"] = np.where(
        lower.str.contains("memcpy|memcpyd2h|memcpyh2d|copy_start|transfer"),
        "gpu_memcpy",
        np.where(lower.str.contains("memset"), "gpu_memset", "kernel"),
    )
    host_pids = [p for p, n in procs.items() if n.startswith("/host:")]
    host = other[~on_gpu & other["pid"].isin(host_pids)]
    # CUDA driver/runtime calls, and XLA's host-side copy events (MemcpyH2D/D2H/D2D), which carry the correlation id
    # of the device copy they issue
    is_api = host["name"].astype(str).str.match(r"^cu[A-Z]|^cuda[A-Z]|^Memcpy(?:H2D|D2H|D2D)$")
    # XLA's correlation ids (args.correlation_id): a device op and the CUDA driver call that launched it share one,
    # and every kernel of a command buffer (a CUDA graph) shares its cuGraphLaunch's: _link_launches links them
    if "correlation" not in other:
        gpu["correlation"] = -1
        host = host.assign(correlation=-1)
    gpu["external_id"] = -1
    frames = dict(frames)
    frames["gpu"] = gpu
    frames["runtime"] = host[is_api].reset_index(drop=True).assign(external_id=-1)
    # JAX's Python tracer: "$file.py:53 make_batch" (the file's base name and the function's first line) and
    # "$<unknown> acquire" (a C function), written as Kineto names its Python frames: "file.py(53): make_batch",
    # "<built-in function acquire>". They nest by time (no ids).
    names = host["name"].astype(str)
    is_python = ~is_api & names.str.startswith("$").to_numpy()
    if is_python.any():
        py = host[is_python].reset_index(drop=True)
        names = py["name"].astype("category")  # renamed once per distinct name, not per frame
        renamed = np.asarray([_kineto_frame_name(str(c)) for c in names.cat.categories], dtype=object)
        frames["python"] = py.assign(name=renamed[names.cat.codes.to_numpy()], python_id=-1)
    frames["cpu_ops"] = host[~is_api & ~is_python].reset_index(drop=True)
    frames["other"] = other[~on_gpu & ~other["pid"].isin(host_pids)].reset_index(drop=True)
    return frames


_JAX_PY_FRAME = re.compile(r"^\$(.+):(\d+) (.+)$")


def _kineto_frame_name(name: str) -> str:
    """A JAX Python-tracer frame name as Kineto writes one: ``$train.py:53 make_batch`` → ``train.py(53):
    make_batch``; ``$<unknown> acquire`` → ``<built-in function acquire>``."""
    if name.startswith("$<unknown> "):
        return f"<built-in function {name[len('$<unknown> ') :]}>"
    m = _JAX_PY_FRAME.match(name)
    return f"{m.group(1)}({m.group(2)}): {m.group(3)}" if m else name[1:]


def _gpu(df: pd.DataFrame) -> pd.DataFrame:
    if len(df):
        names = df["name"].astype("category")
        cats = pd.Series(names.cat.categories.astype(str))
        kinds = np.where(
            cats.str.match(r"^(?:Memcpy|dma)"),
            "memcpy",
            np.where(cats.str.match(r"^Memset"), "memset", np.where(cats.str.contains(_COMM), "comm", "compute")),
        )
        codes = names.cat.codes.to_numpy()
        kind_names = ["compute", "comm", "memcpy", "memset"]
        kind_codes = _by_code([kind_names.index(k) for k in kinds], codes, 0, np.int64)
        kind_codes[(df["cat"] == "gpu_memcpy").to_numpy(dtype=bool, na_value=False)] = 2
        kind_codes[(df["cat"] == "gpu_memset").to_numpy(dtype=bool, na_value=False)] = 3
        parsed = [_MEMCPY_NAME.search(c) for c in cats]
        df = df.assign(
            kind=_categorical_by_code(kind_names, kind_codes),
            memcpy_kind=_categorical_by_code([m.group(1) if m else None for m in parsed], codes),
            host_memory=_categorical_by_code([_host_side(m) for m in parsed], codes),
        )
    out = _conformed(df, GPU_SCHEMA)
    if len(out):
        out = out.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    out["runtime_index"] = -1
    return out


def _conformed(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """:func:`parsers.schema.conform`, without copying the columns that already have their declared dtype.

    conform() casts and copies every column; for the tables of a 1 GB trace that is ~1 s and a second
    copy of each table at the peak. Columns of any other dtype (and object columns) still go through it.
    """
    if not len(df.columns) or any(
        c in df.columns and (d == STR or str(df[c].dtype) != d) for c, d in schema.columns.items()
    ):
        return conform(df, schema)
    n = len(df)
    absent = {
        I64: lambda: np.zeros(n, dtype=np.int64),
        F64: lambda: np.full(n, np.nan),
        BOOL: lambda: np.zeros(n, bool),
    }
    out = {}
    for col, dtype in schema.columns.items():
        if col in df.columns:
            out[col] = df[col].array if dtype == CAT else df[col].to_numpy()
        elif dtype in absent:
            out[col] = absent[dtype]()
        else:
            out[col] = _no_categories(n) if dtype == CAT else np.full(n, None, dtype=object)
    for col in df.columns:
        if col not in schema.columns:
            out[col] = df[col].array
    return pd.DataFrame(out, copy=False)


def _no_categories(n: int) -> pd.Categorical:
    """An all-missing categorical column, as ``pd.Series([None] * n, dtype="category")`` without the list.

    Its empty categories have the dtype pandas gives that Series: float64, or object when ``n`` is 0.
    """
    empty = pd.Index([], dtype=np.float64 if n else object)
    return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=empty)


def _by_code(per_category, codes: np.ndarray, missing, dtype=object) -> np.ndarray:
    """``per_category[codes]``, where code -1 (an event without a name) gets ``missing``.

    Plain indexing would give such an event the last category's value, or an IndexError when every
    event lacks its name (found by fuzzing: a trace whose "name" keys were renamed).
    """
    return np.append(np.asarray(per_category, dtype=dtype), np.asarray([missing], dtype=dtype))[codes]


def _categorical_by_code(per_category: list, codes: np.ndarray, missing=None) -> pd.Categorical:
    """``pd.Categorical(_by_code(per_category, codes, missing))``, worked out on the few distinct codes.

    Factorizing the row-long object array instead cost ~0.1 s per column on the 1.2 M runtime calls of a
    1 GB trace. The values are text or None; the categories are those present, sorted as pandas sorts them.
    """
    values = [*per_category, missing]
    seen = np.bincount(np.asarray(codes) + 1, minlength=len(values))  # code -1 (no name) counts in slot 0
    present = {values[c - 1] for c in np.flatnonzero(seen)}
    present.discard(None)
    categories = sorted(present)
    at = {v: i for i, v in enumerate(categories)}
    lookup = np.array([at.get(v, -1) for v in values], dtype=np.int64)  # lookup[-1]: the missing value's
    return pd.Categorical.from_codes(
        lookup[codes], categories=pd.Index(categories, dtype=None if categories else object)
    )


def _host_side(m) -> str | None:
    if m is None:
        return None
    direction, src, dst = m.groups()
    side = dst if direction.endswith("toH") else src if direction.startswith("Hto") else None
    return side.lower() if side and side.lower() in ("pageable", "pinned") else None


def _python(df: pd.DataFrame, names_are_base_names: bool = False) -> pd.DataFrame:
    """The Python frames, with their file, line and function parsed from the name. ``names_are_base_names``: JAX's
    tracer names a file by its base name alone (``numeric.py`` may be numpy's or the user's), so no frame is taken
    for the user's here; diagnose.derive.host_sites marks them with the run's own files."""
    if len(df):
        names = df["name"].astype("category")
        cats = list(names.cat.categories.astype(str))
        parsed = [_PY_FRAME.match(c) for c in cats]
        codes = names.cat.codes.to_numpy()
        files = _by_code([m.group(1) if m else None for m in parsed], codes, None)
        lines = _by_code([int(m.group(2)) if m else -1 for m in parsed], codes, -1, np.int64)
        funcs = _by_code([m.group(3) if m else c for m, c in zip(parsed, cats)], codes, None)
        user = _by_code(
            [bool(m) and not names_are_base_names and is_user_file(m.group(1)) for m in parsed], codes, False, bool
        )
        df = df.assign(file=pd.Categorical(files), line=lines, function=pd.Categorical(funcs), is_user=user)
    out = _conformed(df, PYTHON_SCHEMA)
    if len(out):
        out = out.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    return out


def is_user_file(file: str) -> bool:
    """False for frames of torch, installed packages, the standard library and built-ins.

    Kineto strips the ``sys.path`` prefix, so library files look like ``torch/nn/modules/module.py``
    and standard-library ones like ``typing.py``; a user's script keeps its own (relative or absolute) path.
    """
    f = file.replace("\\", "/")
    if f.startswith("<") or any(p in f for p in LIBRARY_DIRS):
        return False
    if f.startswith("/"):
        return True
    first = f.lstrip("./").split("/")[0]
    stem = first[:-3] if first.endswith(".py") else first
    return stem not in sys.stdlib_module_names and stem not in LIBRARY_PACKAGES


def _annotations(df: pd.DataFrame) -> pd.DataFrame:
    if len(df):
        names = df["name"].astype("category")
        steps = [float(m.group(1)) if (m := _STEP.match(str(c))) else np.nan for c in names.cat.categories]
        df = df.assign(step=_by_code(steps, names.cat.codes.to_numpy(), np.nan, np.float64))
    out = _conformed(df, ANNOTATION_SCHEMA)
    if len(out):
        out = out.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    return out


def _device_properties(header: dict) -> pd.DataFrame:
    props = header.get("deviceProperties")
    if isinstance(props, str):  # some exporters wrote Python's repr of the list
        try:
            props = ast.literal_eval(props)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            props = None
    if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
        return pd.DataFrame({"id": pd.Series([], dtype=I64), "name": pd.Series([], dtype=object)})
    df = pd.DataFrame(props)
    if "name" not in df:
        df["name"] = None
    return df


def _rank(header: dict) -> int | None:
    info = header.get("distributedInfo")
    if isinstance(info, str):
        try:
            info = ast.literal_eval(info)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            info = None
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        return int(info["rank"])
    return None


def _integral_us(*cols: np.ndarray) -> bool:
    return all(not len(c) or not (c % 1000).any() for c in cols)


def _link(t: Trace) -> None:
    """Fill the index columns that tie the tables together (each step a function: its temporaries go with it)."""
    _return_free_memory()  # what joining the tables freed
    gpu, rt, ops, py = t.gpu, t.runtime, t.cpu_ops, t.python
    # conform() fills an absent int64 column with 0, which here would point at row 0 of a table that may be
    # empty (a trace without Python frames, without cpu ops): every link starts as "none" (-1) instead
    for df, cols in (
        (rt, ("gpu_index", "cpu_op_index", "python_index")),
        (ops, ("parent_index", "top_index", "python_index")),
        (py, ("parent_index", "user_index")),
    ):
        for col in cols:
            df[col] = np.full(len(df), -1, dtype=np.int64)
    tol = 1000 if _integral_us(ops["ts_ns"].to_numpy(), rt["ts_ns"].to_numpy()) else 1

    # GPU work ↔ the runtime call that launched it (same CUPTI correlation id)
    if len(gpu) and len(rt):
        _link_launches(gpu, rt)
    if len(rt):
        rt["sync_kind"] = _sync_kind(rt)
    _link_threads(t, tol)
    _return_free_memory()


def _link_launches(gpu: pd.DataFrame, rt: pd.DataFrame) -> None:
    """runtime_index of GPU work and gpu_index of runtime calls, by correlation id (the first row of each id)."""
    corr, gpu_corr = rt["correlation"].to_numpy(), gpu["correlation"].to_numpy()
    gpu["runtime_index"] = first_row_of(corr, gpu_corr)
    rt["gpu_index"] = first_row_of(gpu_corr, corr)
    has = rt["gpu_index"].to_numpy() >= 0
    g = rt["gpu_index"].to_numpy()[has]
    for col in ("memcpy_kind", "host_memory"):  # of the copy a call issued
        codes = np.full(len(rt), -1, dtype=np.int64)
        codes[has] = gpu[col].cat.codes.to_numpy()[g]
        rt[col] = _categorical_by_code(list(gpu[col].cat.categories), codes)


def first_row_of(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the first row of ``keys`` that holds it (negative keys are no key), or -1.

    A sort and a binary search: a pandas index would keep a hash table of every key alive (~100 MB for
    the 1.2 M runtime calls of a 1 GB trace) and take twice as long.
    """
    rows = np.flatnonzero(keys >= 0)
    order = rows[np.argsort(keys[rows], kind="stable")]  # stable: the first row of a repeated key comes first
    sorted_keys = keys[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    sorted_keys, order = sorted_keys[first], order[first]
    if not len(order):
        return np.full(len(queries), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, queries), len(order) - 1)
    return np.where(sorted_keys[at] == queries, order[at], -1).astype(np.int64)


def _link_threads(t: Trace, tol: int) -> None:
    """The cpu op tree and the Python frames around each op and runtime call, on each thread."""
    rt, ops, py = t.runtime, t.cpu_ops, t.python
    # cpu op tree on each thread
    if len(ops):
        o_ts, o_end = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy()
        o_g = thread_key(ops["pid"].to_numpy(), ops["tid"].to_numpy())
        o_order = nesting_order(o_ts, o_end, o_g)
        parent = parents(o_ts, o_end, o_g, tol, o_order)
        ops["parent_index"] = parent
        ops["top_index"] = _roots(parent)
        _return_free_memory()  # the pointer jumping's temporaries, before the next pass makes its own
        if len(rt):
            rt["cpu_op_index"] = enclosing(
                o_ts,
                o_end,
                o_g,
                parent,
                rt["ts_ns"].to_numpy(),
                rt["end_ns"].to_numpy(),
                thread_key(rt["pid"].to_numpy(), rt["tid"].to_numpy()),
                tol,
                o_order,
            )
            _return_free_memory()
        del o_order
    # Python frames: parent by id where given, else by time; then the nearest user frame
    if len(py):
        p_ts, p_end = py["ts_ns"].to_numpy(), py["end_ns"].to_numpy()
        p_g = thread_key(py["pid"].to_numpy(), py["tid"].to_numpy())
        pids = py["python_id"].to_numpy()
        p_order = nesting_order(p_ts, p_end, p_g)
        if (pids >= 0).all() and len(np.unique(pids)) == len(pids) and "parent_id" in py:
            parent = first_row_of(pids, py["parent_id"].to_numpy())
        else:
            parent = parents(p_ts, p_end, p_g, tol, p_order)
        py["parent_index"] = parent
        py["user_index"] = _nearest_marked(parent, py["is_user"].to_numpy())
        if len(ops):
            ops["python_index"] = enclosing(
                p_ts,
                p_end,
                p_g,
                parent,
                ops["ts_ns"].to_numpy(),
                ops["end_ns"].to_numpy(),
                thread_key(ops["pid"].to_numpy(), ops["tid"].to_numpy()),
                tol,
                p_order,
            )
        if len(rt):
            rt["python_index"] = enclosing(
                p_ts,
                p_end,
                p_g,
                parent,
                rt["ts_ns"].to_numpy(),
                rt["end_ns"].to_numpy(),
                thread_key(rt["pid"].to_numpy(), rt["tid"].to_numpy()),
                tol,
                p_order,
            )
        if "parent_id" in py:
            t.python = py.drop(columns=["parent_id"])


def _return_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing).

    Reading a 1 GB trace frees ~500 MB in pieces scattered over the heap (per-piece columns, parsed
    events), which glibc keeps: without this the process holds 1.1 GB for 0.6 GB of tables and links.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim():
    """glibc's malloc_trim, looked up once at import (not while a file is read), or None."""
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _sync_kind(rt: pd.DataFrame) -> pd.Categorical:
    names = rt["name"].astype("category")
    cats, codes = [str(c) for c in names.cat.categories], names.cat.codes.to_numpy()
    kinds = [SYNC_CALLS.get(c) for c in cats]
    # a DtoH copy into pageable memory (or any cudaMemcpy without Async) blocks the host until it is done
    blocking_copy = (
        _by_code([c.startswith("cudaMemcpyAsync") and k is None for c, k in zip(cats, kinds)], codes, False, bool)
        & (rt["host_memory"] == "pageable").to_numpy(dtype=bool, na_value=False)
        & (rt["memcpy_kind"] == "DtoH").to_numpy(dtype=bool, na_value=False)
    )
    codes = codes.astype(np.int64)
    codes[blocking_copy] = len(kinds) + 1  # past the "missing" slot _categorical_by_code adds
    return _categorical_by_code([*kinds, None, "memcpy"], codes)


def _roots(parent: np.ndarray) -> np.ndarray:
    root = np.where(parent >= 0, parent, np.arange(len(parent)))
    while True:
        nxt = np.where(parent[root] >= 0, parent[root], root)
        if (nxt == root).all():
            return root
        root = nxt


def _nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each node, the nearest node at or above it (following ``parent``) that is marked, or -1."""
    n = len(parent)
    out = np.where(marked, np.arange(n), -1)
    hop = parent.copy()
    todo = np.nonzero(~marked & (hop >= 0))[0]
    while todo.size:
        h = hop[todo]
        got = out[h]
        out[todo] = got
        still = todo[got < 0]
        hop[still] = hop[hop[still]]
        todo = still[hop[still] >= 0]
    return out


def is_trace(head: bytes) -> bool:
    """A Chrome-trace JSON: Kineto's (``traceEvents``, ``schemaVersion``) or JAX's perfetto export."""
    compact = compact_json(head)
    return compact is not None and (
        '"traceEvents"' in compact or '"schemaVersion"' in compact or '"displayTimeUnit"' in compact
    )


READERS = (Reader("trace", TRACES, is_trace, read_trace, "a PyTorch profiler (Kineto) or JAX perfetto trace", (JSON,)),)
