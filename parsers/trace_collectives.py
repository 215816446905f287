"""Collective metadata Kineto writes on NCCL kernels and ``record_param_comms`` cpu ops.

``parsers.trace`` keeps kernels' names and times but drops their ``args``. For a collective
those args say which collective it is and in which process group ("Collective name",
"Process Group Name", "Process Group Ranks", "In msg nelems", "dtype", "Seq" in newer
torch), which is what lets ranks' kernels be matched exactly rather than by order.
:class:`CollectiveArgs` collects them from the same event chunks ``read_trace`` sees (``Trace.collectives``);
:func:`read_collectives` does a pass of its own over a file, for tools that need only these.
Rows are keyed like ``Trace.gpu`` (``ts_ns`` rounded the same way, ``correlation``) and
``Trace.cpu_ops`` (``ts_ns``, ``external_id``) so they join back.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from parsers.schema import F64, I64, STR, Schema, conform
from parsers.trace_events import UNSET
from parsers.trace_stream import read_chunks

COLLECTIVES_SCHEMA = Schema(
    "trace.collectives",
    {
        "source": STR,
        "ts_ns": I64,
        "correlation": I64,
        "external_id": I64,
        "collective": STR,
        "pg_name": STR,
        "pg_ranks": STR,
        "group_size": F64,
        "in_nelems": F64,
        "out_nelems": F64,
        "dtype": STR,
        "msg_bytes": F64,
        "seq": F64,
    },
    {
        "source": "kernel (an NCCL kernel on the GPU) | cpu_op (record_param_comms)",
        "collective": "Kineto's 'Collective name' (allreduce, _allgather_base, ...), None when not written",
        "pg_ranks": "the group's global ranks as Kineto writes them, e.g. '[0, 1]'",
        "msg_bytes": "max(in, out) nelems x the dtype's size, NaN when either is unknown",
        "seq": "the collective's sequence number in its group (torch >= 2.4 writes 'Seq'), NaN when absent",
    },
)

NCCL_KERNEL = re.compile(r"^(?:nccl|rccl)\w*Kernel", re.I)
# bytes per element of the dtype names Kineto writes (c10 ScalarType names)
DTYPE_BYTES = {
    "Float": 4,
    "Half": 2,
    "BFloat16": 2,
    "Double": 8,
    "Int": 4,
    "Long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
}


class CollectiveArgs:
    """Feed it every chunk of events (``on_events``), then take ``frame()``; ``reset()`` restarts."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.rows: list[tuple] = []

    def on_events(self, events: list) -> None:
        for e in events:
            if e.__class__ is not dict or e.get("ph") != "X":
                continue
            cat, name = e.get("cat"), e.get("name")
            if cat in ("kernel", "Kernel") and isinstance(name, str) and NCCL_KERNEL.match(name):
                source = "kernel"
            elif cat == "cpu_op" and name == "record_param_comms":
                source = "cpu_op"
            else:
                continue
            a = e.get("args")
            if not isinstance(a, dict) or "Collective name" not in a and "Process Group Name" not in a:
                continue
            ts = e.get("ts")
            if not isinstance(ts, (int, float)):
                continue
            self.rows.append(
                (
                    source,
                    int(np.rint(float(ts) * 1000.0)),
                    a.get("correlation"),
                    a.get("External id"),
                    a.get("Collective name"),
                    a.get("Process Group Name"),
                    a.get("Process Group Ranks"),
                    a.get("Group size"),
                    a.get("In msg nelems"),
                    a.get("Out msg nelems"),
                    a.get("dtype"),
                    a.get("Seq"),
                )
            )

    def on_structs(self, cat: str, events: list) -> None:
        """Like :meth:`on_events` for one category's ``ph: X`` events as ``parsers.trace_events.Event`` structs."""
        if cat in ("kernel", "Kernel"):
            source, names = "kernel", {n for n in {e.name for e in events} if n is not None and NCCL_KERNEL.match(n)}
        elif cat == "cpu_op":
            source, names = "cpu_op", {"record_param_comms"}
        else:
            return
        if not names:
            return
        unset = UNSET
        for e in [e for e in events if e.name in names]:
            a = e.args
            if a is None or a.collective_name is unset and a.pg_name is unset:
                continue
            if e.ts is None:
                continue
            self.rows.append(
                (
                    source,
                    int(np.rint(e.ts * 1000.0)),
                    *(
                        None if v is unset else v
                        for v in (
                            a.correlation,
                            a.external_id,
                            a.collective_name,
                            a.pg_name,
                            a.pg_ranks,
                            a.group_size,
                            a.in_nelems,
                            a.out_nelems,
                            a.dtype,
                            a.seq,
                        )
                    ),
                )
            )

    def frame(self) -> pd.DataFrame:
        if not self.rows:  # no collective (most traces): the typed empty frame rows_frame gives, ~4 ms sooner
            return COLLECTIVES_SCHEMA.empty()
        return rows_frame(self.rows)


def rows_frame(rows: list[tuple]) -> pd.DataFrame:
    """The collectives table of :class:`CollectiveArgs`' rows."""
    cols = [
        "source",
        "ts_ns",
        "correlation",
        "external_id",
        "collective",
        "pg_name",
        "pg_ranks",
        "group_size",
        "in_nelems",
        "out_nelems",
        "dtype",
        "seq",
    ]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("correlation", "external_id"):
        df[c] = _ints(df[c])
    for c in ("group_size", "in_nelems", "out_nelems", "seq"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(F64)
    for c in ("collective", "pg_name", "pg_ranks", "dtype"):
        df[c] = df[c].map(lambda v: None if v is None else str(v)).astype(object)
    size = df["dtype"].map(DTYPE_BYTES).astype(F64)
    df["msg_bytes"] = np.fmax(df["in_nelems"], df["out_nelems"]) * size
    return conform(df, COLLECTIVES_SCHEMA)


def read_collectives(path: str | os.PathLike) -> pd.DataFrame:
    """The collective metadata of one trace file (a second pass; :class:`CollectiveArgs` avoids it)."""
    c = CollectiveArgs()
    read_chunks(os.fspath(path), c.on_events, c.reset)
    return c.frame()


def _ints(s: pd.Series) -> np.ndarray:
    arr = np.array(pd.to_numeric(s, errors="coerce"), dtype=np.float64)
    arr[~np.isfinite(arr)] = -1
    return arr.astype(np.int64)
