"""A parsed :class:`~parsers.trace.Trace` as a folder of Parquet files, and back, table for table.

The cluster read (``diagnose.cluster``, docs/scaling.md) parses each rank's trace once on a worker and keeps
its tables on disk, so the report that follows, and the next one on the unchanged folder, read columns instead
of JSON: an 81 MiB Kineto trace is about 5 MiB of zstd Parquet, read back in a tenth of its parse.

Layout of one trace's folder::

    <table>.parquet     one per table of the Trace (gpu, runtime, cuda_sync, ...), zstd
    trace.json          path, format, rank, metadata, warnings, and each table's column dtypes

Parquet keeps pandas categoricals when they have categories but gives back an empty categorical as plain
objects, and string categories as objects; ``trace.json`` holds every column's dtype so :func:`read_trace`
restores them: the frames that come back equal the parsed ones (``pandas.testing.assert_frame_equal``,
exact), which tests/parsers/test_trace_parquet.py checks on every trace fixture.

A folder this module did not write, or one cut short, is an :class:`~parsers.errors.InputError` naming it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from parsers.errors import InputError

FORMAT = "gpudiag.trace-parquet/1"
HEADER = "trace.json"
COMPRESSION = "zstd"


def frames_of(trace) -> dict[str, pd.DataFrame]:
    """The Trace's tables by field name (gpu, runtime, ...)."""
    return {
        f.name: getattr(trace, f.name)
        for f in dataclasses.fields(trace)
        if isinstance(getattr(trace, f.name), pd.DataFrame)
    }


def _dtype_of(series: pd.Series) -> dict[str, Any]:
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        spec = {"kind": "category", "categories": str(dtype.categories.dtype), "ordered": bool(dtype.ordered)}
        if not len(series) and len(dtype.categories):  # Parquet keeps no dictionary for a column without rows
            spec["names"] = [str(c) for c in dtype.categories]
        return spec
    return {"kind": str(dtype)}


def write_trace(trace, folder: str | os.PathLike) -> int:
    """Write ``trace``'s tables into ``folder`` (made if missing); the bytes written. The header goes last, so
    a folder without it was cut short and is never read as complete."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / HEADER).unlink(missing_ok=True)
    columns, written = {}, 0
    for name, frame in frames_of(trace).items():
        path = folder / f"{name}.parquet"
        frame.to_parquet(path, compression=COMPRESSION, index=False)
        written += path.stat().st_size
        columns[name] = {"columns": {c: _dtype_of(frame[c]) for c in frame.columns}, "rows": len(frame)}
    header = {
        "format": FORMAT,
        "path": trace.path,
        "trace_format": trace.format,
        "rank": trace.rank,
        "metadata": _tagged(trace.metadata),
        "warnings": list(trace.warnings),
        "tables": columns,
    }
    tmp = folder / (HEADER + ".part")
    tmp.write_text(json.dumps(header, default=str))
    os.replace(tmp, folder / HEADER)
    return written + (folder / HEADER).stat().st_size


def is_trace_folder(folder: str | os.PathLike) -> bool:
    return (Path(folder) / HEADER).is_file()


def read_header(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder) / HEADER
    try:
        header = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(
            folder, f"holds no {HEADER}: it is not a complete trace written by gpudiag's cluster read"
        ) from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise InputError(path, f"cannot be read as gpudiag's Parquet trace header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InputError(
            path, f"is not a {FORMAT} header (format: {header.get('format') if isinstance(header, dict) else None!r})"
        )
    return header


def metadata_of(header: dict[str, Any]) -> dict[str, Any]:
    """The trace's metadata (Kineto's header, process names ...) as the parser gave it, from :func:`read_header`."""
    return _untagged(header.get("metadata")) or {}


def read_table(folder: str | os.PathLike, name: str, header: dict[str, Any] | None = None) -> pd.DataFrame:
    """One table of the trace in ``folder``, as parsed."""
    header = header if header is not None else read_header(folder)
    if name not in header["tables"]:
        raise InputError(folder, f"holds no table {name!r}")
    return _read_one(Path(folder), name, header["tables"][name])


def _read_one(folder: Path, name: str, spec: dict[str, Any]) -> pd.DataFrame:
    path = folder / f"{name}.parquet"
    columns = spec["columns"]
    try:
        frame = pd.read_parquet(path)
    except FileNotFoundError:
        raise InputError(path, "is missing: the Parquet trace folder was cut short or changed") from None
    except Exception as e:  # pyarrow's errors for a damaged file have no common base beyond this
        raise InputError(path, f"cannot be read as Parquet: {e}") from None
    if list(frame.columns) != list(columns) or len(frame) != spec["rows"]:
        raise InputError(path, f"does not hold the {spec['rows']} rows and columns its header lists")
    return _restored(frame, columns)


def read_trace(folder: str | os.PathLike, tables: tuple[str, ...] | None = None):
    """The Trace :func:`write_trace` wrote into ``folder``; ``tables`` limits which tables are read (the rest
    come back empty, with their columns)."""
    from parsers.trace import Trace

    folder = Path(folder)
    header = read_header(folder)
    frames = {}
    for name, spec in header["tables"].items():
        columns = spec["columns"]
        if tables is not None and name not in tables:
            frames[name] = _restored(pd.DataFrame({c: pd.Series([], dtype=object) for c in columns}), columns)
            continue
        frames[name] = _read_one(folder, name, spec)
    fields = {f.name for f in dataclasses.fields(Trace)}
    return Trace(
        path=header["path"],
        format=header["trace_format"],
        rank=header["rank"],
        metadata=metadata_of(header),
        warnings=list(header.get("warnings") or []),
        **{k: v for k, v in frames.items() if k in fields},
    )


def _tagged(value: Any) -> Any:
    """``value`` as JSON can hold it and :func:`_untagged` gives back equal: dicts with keys other than strings
    (Kineto's process names by pid) as tagged pairs, tuples tagged."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and "__pairs__" not in value and "__tuple__" not in value:
            return {k: _tagged(v) for k, v in value.items()}
        return {"__pairs__": [[_tagged(k), _tagged(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [_tagged(v) for v in value]}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _untagged(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__pairs__"}:
            return {_untagged(k): _untagged(v) for k, v in value["__pairs__"]}
        if set(value) == {"__tuple__"}:
            return tuple(_untagged(v) for v in value["__tuple__"])
        return {k: _untagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untagged(v) for v in value]
    return value


def _restored(frame: pd.DataFrame, columns: dict[str, dict]) -> pd.DataFrame:
    """Each column back to the dtype it was written with (empty and string categoricals come back as objects)."""
    out = {}
    for col, spec in columns.items():
        values = frame[col]
        if spec["kind"] == "category":
            cats_dtype = spec["categories"]
            if isinstance(values.dtype, pd.CategoricalDtype):
                cats = values.cat.categories
                codes = values.cat.codes.to_numpy()
            else:
                cats = pd.Index(pd.unique(values.dropna()))
                codes = pd.Categorical(values, categories=cats).codes
            if "names" in spec:
                cats = spec["names"]
            cats = pd.Index(list(cats), dtype=cats_dtype)
            out[col] = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats, ordered=spec["ordered"]))
        elif str(values.dtype) != spec["kind"]:
            out[col] = values.astype(spec["kind"])
        else:
            out[col] = values
    return pd.DataFrame(out, index=pd.RangeIndex(len(frame)), copy=False)
