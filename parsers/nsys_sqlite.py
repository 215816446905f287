"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → the trace tables (:class:`parsers.trace.Trace`).

The export is opened read-only and immutable with Python's ``sqlite3`` (no extension is loaded, no view is
queried: only tables, so nothing in the file runs); a gzipped export is inflated to a temporary file within the
caps of :mod:`parsers.limits`. Times stay the export's int64 ns. What is read from which table:

- ``gpu``: ``CUPTI_ACTIVITY_KIND_KERNEL`` (name = the demangled name), ``_MEMCPY`` (named as Kineto names copies,
  ``Memcpy HtoD (Pageable -> Device)``), ``_MEMSET`` and ``_GRAPH_TRACE`` (a whole CUDA graph launch, when the
  capture used ``--cuda-graph-trace=graph``; named ``CUDA graph <id>``);
- ``runtime``: ``CUPTI_ACTIVITY_KIND_RUNTIME`` (runtime and driver calls; nsys's ``_v3020``-style version suffix
  of runtime names is dropped, so ``cudaStreamSynchronize`` is recognised as a sync);
- ``cuda_sync``: ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``;
- ``annotations``: NVTX push/pop and start/end ranges of ``NVTX_EVENTS`` (category ``user_annotation``, as
  Kineto's ``record_function`` ranges, so an NVTX range named ``ProfilerStep#N`` is step N);
- ``device_properties``: ``TARGET_INFO_GPU``; ``rank``: ``MPI_RANKS``, else ``RANK`` (or the MPI / Slurm twins)
  in the launched process's environment (``META_DATA_CAPTURE``).

Linking (GPU work ↔ launch call by correlation id, ``sync_kind`` of calls) is :func:`parsers.trace.trace_from_tables`'s,
the same code as for Kineto traces. Tables and what is not read: ``docs/traces.md``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.limits import PIECE_BYTES, open_input
from parsers.reader import BINARY, TRACES, Reader
from parsers.trace import Trace, trace_from_tables

NSYS_SQLITE = "nsys-sqlite"
MAGIC = b"SQLite format 3\x00"
EXPECTED = "an Nsight Systems SQLite export (nsys export --type sqlite)"
QUERY_SECONDS = 600  # reading one export may take this long at most (a crafted file could make SQLite work forever)
_PROGRESS_OPS = 10_000  # SQLite virtual-machine steps between two looks at the clock
_FETCH_ROWS = 200_000

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
# with StringIds, one of these tells an nsys export from any other SQLite database
_MARKERS = (
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "ANALYSIS_DETAILS",
    "TARGET_INFO_GPU",
    "ThreadNames",
    KERNEL,
    RUNTIME,
    NVTX,
)

# nsys's enums, for exports without their ENUM_* tables (older nsys); the file's own tables win
_COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
_MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "DeviceStatic",
    6: "ManagedStatic",
    7: "Unknown",
}
_SYNC_KINDS = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_SYNC_LABELS = {
    "UNKNOWN": "Unknown",
    "EVENT_SYNCHRONIZE": "Event Sync",
    "STREAM_WAIT_EVENT": "Stream Wait Event",
    "STREAM_SYNCHRONIZE": "Stream Sync",
    "CONTEXT_SYNCHRONIZE": "Context Sync",
}
_NVTX_RANGES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71}
_NVTX_DOMAIN_CREATE = 75
_RUNTIME_VERSION = re.compile(r"^(cuda\w+?)_v\d{4,}$")  # cudaLaunchKernel_v7000 → cudaLaunchKernel
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")
_ENV = re.compile(r'^(\w+)="?(.*?)"?$')
_NONE32 = 0xFFFFFFFF  # CUPTI's "no id" in 32-bit fields


def is_sqlite(head: bytes) -> bool:
    """Any SQLite database: ``read`` tells an nsys export from other ones, with a message naming what it found.
    (A future reader of another SQLite-based format goes before this one in the registry.)"""
    return head[:16] == MAGIC


def read_nsys_sqlite(path: str | os.PathLike) -> Trace:
    """Read an ``nsys export --type sqlite`` file (or its ``.gz``) into a :class:`parsers.trace.Trace`."""
    path = os.fspath(path)
    with _database_file(path) as db_path:
        try:
            con = _connect(db_path)
        except sqlite3.Error as e:
            raise InputError(path, f"cannot be opened as an SQLite database ({e}); expected {EXPECTED}") from None
        try:
            return _read(path, con)
        except sqlite3.Error as e:
            raise InputError(path, _sqlite_problem(e)) from None
        except UnicodeDecodeError:  # SQLite's own message quoting a damaged schema's bytes
            raise InputError(
                path, f"is a damaged SQLite database (its schema is not UTF-8 text); expected {EXPECTED}"
            ) from None
        finally:
            con.close()


# --- the file -------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _database_file(path: str) -> Iterator[str]:
    """The export as a plain file on disk: the file itself, or a gzipped one inflated (within the caps) to a
    temporary file, removed afterwards. Its SQLite header is checked first."""
    try:
        f = open_input(path)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    tmp = None
    try:
        try:
            head = f.read(100)
            _check_header(path, head, f.disk_bytes if not f.compressed else None)
            if f.compressed:
                fd, tmp = tempfile.mkstemp(prefix="gpudiag-nsys-", suffix=".sqlite")
                size = len(head)
                with os.fdopen(fd, "wb") as out:
                    out.write(head)
                    while piece := f.read(PIECE_BYTES):
                        out.write(piece)
                        size += len(piece)
                _check_header(path, head, size)
        except (EOFError, zlib.error, OSError) as e:
            problem = (
                "the gzip stream ends early: the file is truncated"
                if isinstance(e, EOFError)
                else f"the gzip stream is broken ({e})"
            )
            raise InputError(path, f"is gzip-compressed but cannot be decompressed: {problem}") from None
        finally:
            f.close()
        yield tmp or path
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _check_header(path: str, head: bytes, size: int | None) -> None:
    """The 100-byte SQLite header: the magic, a page size, and whether the file is as long as it says."""
    if not head:
        raise InputError(path, f"is empty; expected {EXPECTED}")
    if not head.startswith(MAGIC[: len(head)]) or len(head) >= 16 and head[:16] != MAGIC:
        raise InputError(path, f"is not an SQLite database (it starts with {head[:16]!r}); expected {EXPECTED}")
    if len(head) < 100:
        raise InputError(path, f"is cut off inside its SQLite header ({len(head)} of 100 bytes); expected {EXPECTED}")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        raise InputError(path, f"has a damaged SQLite header (page size {page}); expected {EXPECTED}")
    pages = int.from_bytes(head[28:32], "big")
    if size is not None and pages and head[24:28] == head[92:96] and size < page * pages:
        raise InputError(
            path,
            f"is truncated: {size:,} bytes of the {page * pages:,} its SQLite header declares "
            "(was the export or the copy cut short?)",
        )


def _connect(db_path: str) -> sqlite3.Connection:
    # immutable: SQLite reads the file as it is, touching no journal or lock (the file is data, not a database in use)
    uri = Path(db_path).resolve().as_uri() + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    con.text_factory = lambda b: b.decode("utf-8", errors="replace")  # a damaged string is still a string
    for pragma in ("query_only = ON", "trusted_schema = OFF", "cell_size_check = ON", "mmap_size = 0"):
        con.execute(f"PRAGMA {pragma}")
    deadline = time.monotonic() + QUERY_SECONDS
    con.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, _PROGRESS_OPS)
    return con


def _sqlite_problem(e: sqlite3.Error) -> str:
    text = str(e)
    if "interrupted" in text:
        return f"reading it took longer than {QUERY_SECONDS} s; expected {EXPECTED}"
    if "not a database" in text:
        return f"is not a readable SQLite database (SQLite says: {text}); expected {EXPECTED}"
    return f"is a damaged or truncated SQLite database (SQLite says: {text}); expected {EXPECTED}"


# --- the tables -----------------------------------------------------------------------------------------------------


class _Db:
    """The export's tables (real tables only: a view could run code), their columns, its strings and enums."""

    def __init__(self, path: str, con: sqlite3.Connection):
        self.path, self.con = path, con
        self.tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {row[1] for row in self.con.execute(f"PRAGMA table_info({_quote(table)})")}
        return self._columns[table]

    def has(self, table: str, column: str) -> bool:
        return column in self.columns(table) or column == "rowid"

    def ints(self, table: str, cols: dict[str, int], required: tuple[str, ...]) -> dict:
        """Integer columns of a table as int64 arrays (NULL → the column's default; a column this nsys version
        lacks → its default). Values are CAST so a text or real in an INTEGER column cannot break the arrays."""
        missing = [c for c in required if not self.has(table, c)]
        if missing:
            raise InputError(
                self.path,
                f"is not a whole Nsight Systems export: its table {table} lacks the column(s) "
                f"{', '.join(missing)} that nsys 2021 and later write; expected {EXPECTED}",
            )
        exprs = [
            f"CAST(COALESCE({_quote(c)}, {d}) AS INTEGER)" if self.has(table, c) else str(int(d))
            for c, d in cols.items()
        ]
        cur = self.con.execute(f"SELECT {', '.join(exprs)} FROM {_quote(table)}")
        pieces = [np.empty((0, len(cols)), dtype=np.int64)]
        while rows := cur.fetchmany(_FETCH_ROWS):  # a piece at a time: rows as Python tuples cost ~10× their ints
            pieces.append(np.array(rows, dtype=np.int64).reshape(len(rows), len(cols)))
        arr = np.concatenate(pieces) if len(pieces) > 2 else pieces[-1]
        return {c: arr[:, i] for i, c in enumerate(cols)}

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """The StringIds values of ``ids``."""
        out: dict[int, str] = {}
        wanted = [int(i) for i in np.unique(ids) if i >= 0]
        for start in range(0, len(wanted), 900):  # SQLite's bound-parameter limit
            chunk = wanted[start : start + 900]
            sql = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})"
            out.update((int(i), str(v)) for i, v in self.con.execute(sql, chunk) if v is not None)
        return out

    def enum(self, table: str) -> dict[int, str]:
        """An ENUM_* table as id → symbol name; empty when the export lacks it (older nsys)."""
        if table not in self.tables or not {"id", "name"} <= self.columns(table):
            return {}
        return {
            int(i): str(n)
            for i, n in self.con.execute(f"SELECT CAST(id AS INTEGER), name FROM {_quote(table)}")
            if i is not None and n is not None
        }

    def key_values(self, table: str, key: str = "name", value: str = "value") -> list[tuple[str, str]]:
        if table not in self.tables or not {key, value} <= self.columns(table):
            return []
        return [
            (str(k), str(v))
            for k, v in self.con.execute(f"SELECT {key}, {value} FROM {_quote(table)}")
            if k is not None and v is not None
        ]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _read(path: str, con: sqlite3.Connection) -> Trace:
    db = _Db(path, con)
    _require_nsys(db)
    warnings: list[str] = []
    parts = [df for df in (_kernels(db), _memcpys(db), _memsets(db), _graphs(db)) if df is not None]
    gpu = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    runtime = _runtime(db) if RUNTIME in db.tables else pd.DataFrame()
    cuda_sync = _syncs(db) if SYNC in db.tables else pd.DataFrame()
    annotations = _nvtx(db, warnings) if NVTX in db.tables else pd.DataFrame()
    dropped = sum(int(df.attrs.get("dropped", 0)) for df in (*parts, runtime, cuda_sync, annotations))
    if dropped:
        warnings.append(f"{dropped:,} rows ended before they started (or had a time beyond int64 ns) and were skipped")
    if not any(t in db.tables for t in (KERNEL, MEMCPY, MEMSET, GRAPH, RUNTIME)):
        warnings.append(
            "the export has no CUDA activity (no CUPTI_ACTIVITY_KIND_* tables): capture with "
            "nsys profile --trace=cuda,nvtx for the GPU timeline"
        )
    gpu_pid = gpu["process_pid"].to_numpy() if len(gpu) else np.array([], dtype=np.int64)
    rt_pid = runtime["pid"].to_numpy() if len(runtime) else np.array([], dtype=np.int64)
    processes = sorted(int(p) for p in set(gpu_pid.tolist()) | set(rt_pid.tolist()) if p >= 0)
    if len(processes) > 1:
        # CUPTI counts correlation ids per process: keep the pairs of different processes apart
        if len(gpu):
            gpu["correlation"] = _per_process(gpu["correlation"].to_numpy(), gpu_pid)
        if len(runtime):
            runtime["correlation"] = _per_process(runtime["correlation"].to_numpy(), rt_pid)
        shown = ", ".join(map(str, processes[:8])) + (" …" if len(processes) > 8 else "")
        warnings.append(
            f"the export holds {len(processes)} processes with CUDA activity (pids {shown}); they are "
            "read as one trace, so ranks are not told apart: give each rank its own report "
            "(nsys profile -o report_rank%q{RANK} …) to analyse them one by one"
        )
    warnings += _diagnostics(db)
    rank = _rank(db, warnings)
    return trace_from_tables(
        path,
        NSYS_SQLITE,
        gpu=gpu,
        runtime=runtime,
        cuda_sync=cuda_sync,
        annotations=annotations,
        device_properties=_device_properties(db),
        rank=rank,
        metadata=_metadata(db, processes),
        warnings=warnings,
    )


def _require_nsys(db: _Db) -> None:
    if "StringIds" in db.tables and any(t in db.tables for t in _MARKERS):
        return
    if "StringTable" in db.tables and KERNEL in db.tables:
        raise InputError(
            db.path, f"is an nvprof database (it has nvprof's StringTable, not nsys's StringIds); expected {EXPECTED}"
        )
    found = sorted(db.tables)
    listed = ", ".join(found[:8]) + (f" … ({len(found)} in all)" if len(found) > 8 else "") if found else "none"
    raise InputError(
        db.path,
        f"is an SQLite database but not an Nsight Systems export: it lacks nsys's tables "
        f"(StringIds with CUPTI_ACTIVITY_KIND_*, TARGET_INFO_*, META_DATA_EXPORT …); found "
        f"tables: {listed}; expected {EXPECTED}",
    )


def _times(cols: dict) -> tuple[np.ndarray, dict]:
    """Rows whose end is at or after their start (and both are times int64 ns can hold): their mask, and the
    rows' columns with ts_ns, dur_ns, end_ns."""
    start, end = cols.pop("start"), cols.pop("end")
    ok = (start >= 0) & (end >= start) & (end < 2**62)
    out = {k: v[ok] for k, v in cols.items()}
    out["ts_ns"], out["end_ns"] = start[ok], end[ok]
    out["dur_ns"] = out["end_ns"] - out["ts_ns"]
    return ok, out


def _frame(cols: dict, dropped: int) -> pd.DataFrame:
    df = pd.DataFrame(cols)
    df.attrs["dropped"] = dropped
    return df


def _process(global_id: np.ndarray) -> np.ndarray:
    """The OS pid in nsys's serialized global ids (bits 24-47); -1 where absent."""
    return np.where(global_id >= 0, (global_id >> 24) & 0xFFFFFF, -1)


def _id32(values: np.ndarray) -> np.ndarray:
    return np.where((values < 0) | (values == _NONE32), -1, values)


def _gpu_common(db: _Db, table: str, extra: dict[str, int], required: tuple[str, ...]) -> tuple[np.ndarray, dict]:
    cols = db.ints(
        table,
        {"start": -1, "end": -2, "deviceId": -1, "streamId": -1, "correlationId": -1, "globalPid": -1, **extra},
        ("start", "end", "deviceId", "streamId", *required),
    )
    ok, c = _times(cols)
    c["device"] = _id32(c.pop("deviceId"))
    c["stream"] = _id32(c.pop("streamId"))
    c["correlation"] = _id32(c.pop("correlationId"))
    c["process_pid"] = _process(c.pop("globalPid"))
    c["pid"], c["tid"] = c["device"], c["stream"]  # as Kineto: a GPU row's pid is its device, its tid its stream
    c["external_id"] = np.full(len(c["ts_ns"]), -1, dtype=np.int64)
    return ok, c


def _names(ids: np.ndarray, strings: dict[int, str]) -> pd.Categorical:
    uniq, codes = np.unique(ids, return_inverse=True)
    cats = [strings.get(int(i)) for i in uniq]
    return pd.Categorical(np.array(cats, dtype=object)[codes] if len(ids) else [])


def _kernels(db: _Db) -> pd.DataFrame | None:
    if KERNEL not in db.tables:
        return None
    named = (
        "shortName"
        if "demangledName" not in db.columns(KERNEL) and "shortName" in db.columns(KERNEL)
        else "demangledName"
    )
    ok, c = _gpu_common(db, KERNEL, {"demangledName": -1, "shortName": -1}, (named,))
    full, short = c.pop("demangledName"), c.pop("shortName")
    strings = db.strings(np.concatenate([full, short]))
    c["name"] = _names(np.where(np.isin(full, list(strings)), full, short), strings)
    c["short_name"] = _names(short, strings)
    c["cat"] = np.full(len(full), "kernel", dtype=object)
    return _frame(c, int((~ok).sum()))


def _memcpys(db: _Db) -> pd.DataFrame | None:
    if MEMCPY not in db.tables:
        return None
    ok, c = _gpu_common(
        db, MEMCPY, {"bytes": -1, "copyKind": 0, "srcKind": 7, "dstKind": 7}, ("correlationId", "bytes", "copyKind")
    )
    direction = _labels(db.enum("ENUM_CUDA_MEMCPY_OPER"), _COPY_KINDS, _copy_kind)
    memory = _labels(db.enum("ENUM_CUDA_MEM_KIND"), _MEM_KINDS, _mem_kind)
    copy, src, dst = c.pop("copyKind"), c.pop("srcKind"), c.pop("dstKind")
    # Kineto's name for a copy, which parsers.trace reads memcpy_kind and host_memory from
    c["name"] = pd.Categorical(
        [
            f"Memcpy {direction.get(k, 'Unknown')} ({memory.get(s, 'Unknown')} -> {memory.get(d, 'Unknown')})"
            for k, s, d in zip(copy, src, dst)
        ]
    )
    c["bytes"] = np.where(c["bytes"] >= 0, c["bytes"], np.nan)
    c["cat"] = np.full(len(copy), "gpu_memcpy", dtype=object)
    return _frame(c, int((~ok).sum()))


def _memsets(db: _Db) -> pd.DataFrame | None:
    if MEMSET not in db.tables:
        return None
    ok, c = _gpu_common(db, MEMSET, {"bytes": -1, "memKind": 7}, ("correlationId", "bytes"))
    memory = _labels(db.enum("ENUM_CUDA_MEM_KIND"), _MEM_KINDS, _mem_kind)
    c["name"] = pd.Categorical([f"Memset ({memory.get(k, 'Unknown')})" for k in c.pop("memKind")])
    c["bytes"] = np.where(c["bytes"] >= 0, c["bytes"], np.nan)
    c["cat"] = np.full(len(c["name"]), "gpu_memset", dtype=object)
    return _frame(c, int((~ok).sum()))


def _graphs(db: _Db) -> pd.DataFrame | None:
    """Whole CUDA-graph launches (``--cuda-graph-trace=graph``): one GPU row per launch, as long as the graph ran."""
    if GRAPH not in db.tables:
        return None
    ok, c = _gpu_common(db, GRAPH, {"graphId": -1}, ("correlationId", "graphId"))
    c["name"] = pd.Categorical([f"CUDA graph {g}" for g in c.pop("graphId")])
    c["cat"] = np.full(len(c["name"]), "cuda_graph", dtype=object)
    return _frame(c, int((~ok).sum()))


def _labels(from_file: dict[int, str], fallback: dict[int, str], convert) -> dict[int, str]:
    return {i: convert(n) for i, n in from_file.items()} if from_file else dict(fallback)


def _copy_kind(symbol: str) -> str:
    """``CUDA_MEMCPY_KIND_HTOD`` → ``HtoD`` (Kineto's spelling); ``..._UVM_DTOH`` → ``DtoH``."""
    m = re.search(r"([A-Z])TO([A-Z])$", symbol)
    return f"{m.group(1)}to{m.group(2)}" if m else "Unknown"


def _mem_kind(symbol: str) -> str:
    """``CUDA_MEMOPR_MEMORY_KIND_PAGEABLE`` → ``Pageable``; ``..._DEVICE_STATIC`` → ``DeviceStatic``."""
    tail = symbol.split("MEMORY_KIND_")[-1]
    return "".join(w.capitalize() for w in tail.split("_")) or "Unknown"


def _runtime(db: _Db) -> pd.DataFrame:
    cols = db.ints(
        RUNTIME,
        {"start": -1, "end": -2, "globalTid": -1, "correlationId": -1, "nameId": -1, "eventClass": -1},
        ("start", "end", "globalTid", "correlationId", "nameId"),
    )
    ok, c = _times(cols)
    tid = c.pop("globalTid")
    c["pid"] = _process(tid)
    c["tid"] = np.where(tid >= 0, tid & 0xFFFFFF, -1)
    c["correlation"] = _id32(c.pop("correlationId"))
    c["external_id"] = np.full(len(tid), -1, dtype=np.int64)
    name_ids = c.pop("nameId")
    strings = {i: _RUNTIME_VERSION.sub(r"\1", n) for i, n in db.strings(name_ids).items()}
    names = _names(name_ids, strings)
    c["name"] = names
    classes = db.enum("ENUM_NSYS_EVENT_CLASS")
    event_class = c.pop("eventClass")
    by_name = np.where(pd.Series(names).astype(str).str.startswith("cuda").to_numpy(), "cuda_runtime", "cuda_driver")
    by_class = np.array([_event_class(classes.get(int(e), "")) for e in event_class], dtype=object)
    c["cat"] = pd.Categorical(np.where(pd.notna(by_class), by_class, by_name))
    return _frame(c, int((~ok).sum()))


def _event_class(symbol: str) -> str | None:
    if symbol.endswith("CUDA_RUNTIME"):
        return "cuda_runtime"
    if symbol.endswith("CUDA_DRIVER"):
        return "cuda_driver"
    return None


def _syncs(db: _Db) -> pd.DataFrame:
    cols = db.ints(
        SYNC,
        {"start": -1, "end": -2, "deviceId": -1, "streamId": -1, "correlationId": -1, "syncType": -1},
        ("start", "end", "streamId", "correlationId", "syncType"),
    )
    ok, c = _times(cols)
    kinds = {
        i: _SYNC_LABELS.get(n.split("SYNCHRONIZATION_TYPE_")[-1], n) for i, n in db.enum("ENUM_CUPTI_SYNC_TYPE").items()
    } or _SYNC_KINDS
    c["kind"] = pd.Categorical([kinds.get(int(k), "Unknown") for k in c.pop("syncType")])
    c["device"] = _id32(c.pop("deviceId"))
    c["stream"] = _id32(c.pop("streamId"))
    c["correlation"] = _id32(c.pop("correlationId"))
    c["wait_on_stream"] = np.full(len(c["ts_ns"]), -1, dtype=np.int64)
    return _frame(c, int((~ok).sum()))


def _nvtx(db: _Db, warnings: list[str]) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges as annotations (the user's own ranges: category user_annotation)."""
    have = db.columns(NVTX)
    types = {n: i for i, n in db.enum("ENUM_NSYS_EVENT_TYPE").items()}
    ranges = [types.get(n, i) for n, i in _NVTX_RANGES.items()]
    domain_create = types.get("NvtxDomainCreate", _NVTX_DOMAIN_CREATE)
    cols = db.ints(
        NVTX,
        {"start": -1, "end": -2, "eventType": -1, "globalTid": -1, "textId": -1, "domainId": -1, "rowid": -1},
        ("start", "eventType"),
    )
    kind = cols["eventType"]
    is_range = np.isin(kind, ranges)
    texts = {}
    if "text" in have:
        for rowid, text in db.con.execute(f"SELECT rowid, text FROM {_quote(NVTX)} WHERE text IS NOT NULL"):
            texts[int(rowid)] = str(text)
    domains = {
        int(d): texts.get(int(r), "") for d, r, k in zip(cols["domainId"], cols["rowid"], kind) if k == domain_create
    }
    open_ranges = int((is_range & (cols["end"] < 0)).sum())
    if open_ranges:
        warnings.append(f"{open_ranges:,} NVTX ranges never ended (no end time) and were skipped")
    sel = {k: v[is_range & (cols["end"] >= 0)] for k, v in cols.items()}
    ok, c = _times(sel)
    strings = db.strings(c["textId"])
    names = [texts.get(int(r), strings.get(int(t))) for r, t in zip(c.pop("rowid"), c.pop("textId"))]
    tid = c.pop("globalTid")
    c["pid"] = _process(tid)
    c["tid"] = np.where(tid >= 0, tid & 0xFFFFFF, -1)
    c["name"] = pd.Categorical(names)
    c["cat"] = np.full(len(names), "user_annotation", dtype=object)
    c["domain"] = pd.Categorical([domains.get(int(d)) for d in c.pop("domainId")])
    c.pop("eventType")
    return _frame(c, int((~ok).sum()))


# --- what the export says of itself ---------------------------------------------------------------------------------

_PROPERTY_NAMES = {
    "totalMemory": "totalGlobalMem",
    "smCount": "numSms",
    "threadsPerWarp": "warpSize",
    "maxShmemPerBlock": "sharedMemPerBlock",
    "maxShmemPerSm": "sharedMemPerMultiprocessor",
    "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
    "maxRegistersPerBlock": "regsPerBlock",
    "maxRegistersPerSm": "regsPerMultiprocessor",
}


def _device_properties(db: _Db) -> pd.DataFrame | None:
    """TARGET_INFO_GPU with Kineto's deviceProperties names where they mean the same (``id`` = the CUDA device)."""
    if "TARGET_INFO_GPU" not in db.tables:
        return None
    cur = db.con.execute('SELECT * FROM "TARGET_INFO_GPU"')
    df = pd.DataFrame(cur.fetchall(), columns=[d[0] for d in cur.description])
    df = df.rename(columns={"id": "nsys_id"}).rename(columns={"cuDevice": "id", **_PROPERTY_NAMES})
    if "name" not in df:
        df["name"] = None
    return df


def _rank(db: _Db, warnings: list[str]) -> int | None:
    """MPI_RANKS when it names one rank; else RANK (or an MPI / Slurm twin) in the profiled process's environment."""
    if "MPI_RANKS" in db.tables and "rank" in db.columns("MPI_RANKS"):
        ranks = sorted(
            {
                int(r)
                for (r,) in db.con.execute('SELECT DISTINCT CAST("rank" AS INTEGER) FROM "MPI_RANKS"')
                if r is not None
            }
        )
        if len(ranks) == 1:
            return ranks[0]
        if ranks:
            warnings.append(f"the export holds MPI ranks {', '.join(map(str, ranks[:8]))}: it is read as one trace")
            return None
    env = {}
    for name, value in db.key_values("META_DATA_CAPTURE"):
        if name.endswith("ENVIRONMENT_VARIABLE") and (m := _ENV.match(value)):
            env.setdefault(m.group(1), m.group(2))
    for var in _RANK_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    return None


def _metadata(db: _Db, processes: list[int]) -> dict:
    export = dict(db.key_values("META_DATA_EXPORT"))
    system = dict(db.key_values("TARGET_INFO_SYSTEM_ENV"))
    meta: dict = {
        "nsys_version": export.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": export.get("EXPORT_SCHEMA_VERSION"),
        "driver_version": system.get("NvDriverVersion"),
        "cuda_driver_version": system.get("CudaDriverVersion"),
        "os": system.get("OsDescription"),
    }
    if "TARGET_INFO_SESSION_START_TIME" in db.tables and "utcEpochNs" in db.columns("TARGET_INFO_SESSION_START_TIME"):
        row = db.con.execute('SELECT CAST(utcEpochNs AS INTEGER) FROM "TARGET_INFO_SESSION_START_TIME"').fetchone()
        if row and row[0]:
            # times are ns since the session started: this is their epoch base, as Kineto's baseTimeNanoseconds
            meta["header"] = {"baseTimeNanoseconds": int(row[0])}
    if "PROCESSES" in db.tables and {"pid", "name"} <= db.columns("PROCESSES") and processes:
        wanted = set(processes)
        meta["process_names"] = {
            int(p): str(n)
            for p, n in db.con.execute('SELECT pid, name FROM "PROCESSES"')
            if isinstance(p, int) and p in wanted
        }
    meta["tables"] = sorted(t for t in db.tables if t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "CUDA_GRAPH")))
    return {k: v for k, v in meta.items() if v is not None}


def _diagnostics(db: _Db, most: int = 10) -> list[str]:
    """What Nsight Systems itself warned of while capturing (DIAGNOSTIC_EVENT: warnings and errors)."""
    if "DIAGNOSTIC_EVENT" not in db.tables or not {"severity", "text"} <= db.columns("DIAGNOSTIC_EVENT"):
        return []
    levels = db.enum("ENUM_DIAGNOSTIC_SEVERITY_LEVEL") or {2: "Warning", 3: "Error"}
    serious = [i for i, n in levels.items() if n in ("Warning", "Error")]
    if not serious:
        return []
    sql = (
        f'SELECT CAST(severity AS INTEGER), text FROM "DIAGNOSTIC_EVENT" WHERE severity IN '
        f"({','.join(map(str, serious))}) AND text IS NOT NULL ORDER BY rowid LIMIT {most}"
    )
    return [
        f"Nsight Systems {levels.get(s, 'warning').lower()}: {' '.join(str(t).split())}" for s, t in db.con.execute(sql)
    ]


def _per_process(correlation: np.ndarray, pid: np.ndarray) -> np.ndarray:
    return np.where(correlation >= 0, (np.maximum(pid, 0) << 32) | correlation, -1)


READERS = (Reader(NSYS_SQLITE, TRACES, is_sqlite, read_nsys_sqlite, EXPECTED, (BINARY,)),)
