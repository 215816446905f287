"""Per-step allocator statistics (``memory/rank<N>.stats.jsonl``) → one row per record.

Each line is ``{"kind": "memory_stats", "rank", "step", "t_ns", "framework": "torch"|"jax",
"stats": {...}}`` with ``stats`` as ``torch.cuda.memory_stats()`` or JAX's
``device.memory_stats()`` returned it. Both land in one table whose columns carry
units; a key the framework did not report is NaN (JAX has no requested or active
bytes, torch has no largest free block), never a guess.

The log may be gzip-compressed (fixtures are). A crashed run can leave a partial last line: it is dropped with a warning in
``df.attrs["warnings"]``; a bad line anywhere else is an :class:`InputError`.

A file a user saved by hand is read too, as one memory-stats sample (no step, no time, with a warning saying so):
``json.dump(torch.cuda.memory_stats(), f)`` (flat dotted keys, pretty-printed or not), torch's
``memory_stats_as_nested_dict()``, JAX's ``device.memory_stats()``, or any of those one level down in an object
that holds more (``{"memory_stats": {...}, "losses": [...]}``). A log whose lines are such dicts rather than
gpudiag's records gets one sample a line, numbered 0, 1, 2 ... in file order.
"""

from __future__ import annotations

import json
import os
import warnings as _warnings

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.reader import JSON, MEMORY_STATS, Reader, compact_json
from parsers.run_folder import rank_of
from parsers.run_records import MEMORY_STATS_RECORD
from parsers.schema import F64, I64, STR, Schema, conform

# output column → key in torch.cuda.memory_stats()
TORCH_KEYS = {
    "allocated_bytes": "allocated_bytes.all.current",
    "allocated_peak_bytes": "allocated_bytes.all.peak",
    "reserved_bytes": "reserved_bytes.all.current",
    "reserved_peak_bytes": "reserved_bytes.all.peak",
    "active_bytes": "active_bytes.all.current",
    "active_peak_bytes": "active_bytes.all.peak",
    "requested_bytes": "requested_bytes.all.current",
    "requested_peak_bytes": "requested_bytes.all.peak",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "inactive_split_blocks": "inactive_split.all.current",
    "reserved_large_pool_bytes": "reserved_bytes.large_pool.current",
    "reserved_small_pool_bytes": "reserved_bytes.small_pool.current",
    "allocated_large_pool_bytes": "allocated_bytes.large_pool.current",
    "allocated_small_pool_bytes": "allocated_bytes.small_pool.current",
    "segments": "segment.all.current",
    "segments_allocated_total": "segment.all.allocated",
    "segments_freed_total": "segment.all.freed",
    "allocations": "allocation.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "num_device_alloc": "num_device_alloc",
    "num_device_free": "num_device_free",
    "oversize_segments": "oversize_segments.current",
    "max_split_size_bytes": "max_split_size",
}
# output column → key in JAX's device.memory_stats()
JAX_KEYS = {
    "allocated_bytes": "bytes_in_use",
    "allocated_peak_bytes": "peak_bytes_in_use",
    "reserved_bytes": "bytes_reserved",
    "reserved_peak_bytes": "peak_bytes_reserved",
    "pool_bytes": "pool_bytes",
    "pool_peak_bytes": "peak_pool_bytes",
    "largest_free_block_bytes": "largest_free_block_bytes",
    "limit_bytes": "bytes_limit",
    "largest_alloc_bytes": "largest_alloc_size",
    "num_allocs": "num_allocs",
}

MEMORY_STATS_SCHEMA = Schema(
    "memory_stats",
    {
        "rank": I64,
        "step": I64,
        "t_ns": F64,
        "framework": STR,
        "device": F64,
        **{c: F64 for c in dict.fromkeys([*TORCH_KEYS, *JAX_KEYS])},
    },
    docs={
        "t_ns": "unix epoch ns when the stats were read (the step's end)",
        "allocated_bytes": "torch allocated_bytes.all.current / JAX bytes_in_use",
        "reserved_bytes": "torch reserved_bytes.all.current / JAX bytes_reserved (0 when JAX preallocates)",
        "pool_bytes": "JAX: the preallocated BFC pool",
        "largest_free_block_bytes": "JAX only",
    },
)


def read_memory_stats(path: str | os.PathLike) -> pd.DataFrame:
    """One row per memory_stats record, sorted by (rank, step); ``attrs["warnings"]`` lists what was skipped."""
    try:
        raw = read_input(path, lines=True, json=True)  # gunzipped, within the caps of parsers/limits.py
    except OSError as e:
        raise InputError(path, f"cannot read memory stats log: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"expected a UTF-8 JSON-lines memory stats log; byte {e.start} is not UTF-8") from None
    document = _one_object(text)
    if document is not None:
        return _single_sample(document, path)
    lines = text.split("\n")
    ends_cleanly = text.endswith("\n")
    warnings: list[str] = []
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
        try:
            record = json.loads(line)
        except ValueError as e:
            if last and not ends_cleanly:
                warnings.append(
                    f"{os.fspath(path)}: ignored the partial last line {number} (the run stopped mid-write)"
                )
                continue
            raise InputError(path, f"line {number}: expected a JSON object, found {line[:60]!r} ({e})") from None
        if not isinstance(record, dict):
            raise InputError(path, f"line {number}: expected a JSON object, found {type(record).__name__}")
        if record.get("kind", MEMORY_STATS_RECORD.kind) != MEMORY_STATS_RECORD.kind:
            continue
        if "stats" not in record and "kind" not in record and _has_stats_keys(_flat(record)):
            record = {"step": len(rows), "stats": _flat(record)}  # a bare memory_stats() dict a line
        rows.append(_row(record, path, number))
    if not rows:
        if not text.strip():
            raise InputError(path, 'is empty; expected JSON lines of {"kind": "memory_stats", ...}')
        raise InputError(path, 'has no memory_stats records (lines with "kind": "memory_stats")')
    df = conform(pd.DataFrame(rows), MEMORY_STATS_SCHEMA)
    df = df.sort_values(["rank", "step", "t_ns"], kind="stable").reset_index(drop=True)
    df.attrs["warnings"] = warnings
    for message in warnings:
        _warn(message)
    return df


def _one_object(text: str) -> dict | None:
    """The file as one JSON object that is not a gpudiag record (no "stats", no "kind"), else None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None  # JSON lines, or broken: the line reader says which line
    if not isinstance(document, dict) or "stats" in document or "kind" in document:
        return None
    return document


def _single_sample(document: dict, path) -> pd.DataFrame:
    """A saved ``memory_stats()`` dict (or an object holding one under some key) as one sample of step 0."""
    stats, where = _flat(document), ""
    if not _has_stats_keys(stats):
        nested = [(k, _flat(v)) for k, v in document.items() if isinstance(v, dict)]
        found = [(k, v) for k, v in nested if _has_stats_keys(v)]
        if not found:
            raise InputError(
                path,
                "is a JSON object without memory_stats() keys (torch's 'allocated_bytes.all.current', JAX's "
                f"'bytes_in_use'; its keys: {', '.join(map(str, list(document)[:8]))}); expected torch.cuda.memory_stats() "
                "or JAX's device.memory_stats() saved as JSON, or the memory/rank<N>.stats.jsonl log gpudiag profile writes",
            )
        key, stats = found[0]
        where = f" (under the key {key!r})"
    framework = "torch" if any(k in stats for k in TORCH_KEYS.values()) else "jax"
    record = {"rank": rank_of(path), "step": 0, "framework": framework, "stats": stats}
    df = conform(pd.DataFrame([_row(record, path, 1)]), MEMORY_STATS_SCHEMA)
    df.attrs["warnings"] = [
        f"{os.fspath(path)}: read as one {_CALL[framework]} sample{where}, with no step or time: its peaks "
        "are judged, not how memory changed from step to step (gpudiag profile records a sample every step)"
    ]
    _warn(df.attrs["warnings"][0])
    return df


def _warn(message: str) -> None:
    """A note for the report: the loader turns a reader's UserWarnings into the report's notes."""
    _warnings.warn(message, UserWarning, stacklevel=3)


_CALL = {"torch": "torch.cuda.memory_stats()", "jax": "JAX device.memory_stats()"}


def _flat(stats: dict) -> dict:
    """torch's ``memory_stats_as_nested_dict()`` as ``memory_stats()``'s dotted keys; a flat dict as it is."""
    if not any(isinstance(v, dict) for v in stats.values()):
        return stats
    out = {}
    for key, value in stats.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _flat(value).items()})
        else:
            out[key] = value
    return out


def _has_stats_keys(stats: dict) -> bool:
    return any(k in stats for k in TORCH_KEYS.values()) or JAX_KEYS["allocated_bytes"] in stats


def _row(record: dict, path, number: int) -> dict:
    stats = record.get("stats")
    if not isinstance(stats, dict):
        raise InputError(path, f'line {number}: expected "stats" to be an object, found {type(stats).__name__}')
    framework = record.get("framework") or ("jax" if "bytes_in_use" in stats else "torch")
    if framework not in ("torch", "jax"):
        raise InputError(path, f"line {number}: expected framework 'torch' or 'jax', found {framework!r}")
    keys = TORCH_KEYS if framework == "torch" else JAX_KEYS
    try:
        row = {
            "rank": int(record.get("rank", 0)),
            "step": int(record["step"]),
            "t_ns": float(record["t_ns"]) if record.get("t_ns") is not None else np.nan,
            "framework": framework,
            "device": record.get("device", np.nan),
        }
        if not all(-(2**63) <= row[k] < 2**63 for k in ("rank", "step")):  # an int64 column cannot hold it
            raise ValueError
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: int(1e400) is inf
        raise InputError(
            path,
            f'line {number}: expected integer "step" and "rank" and a number "t_ns", '
            f"found step={record.get('step')!r} rank={record.get('rank')!r} t_ns={record.get('t_ns')!r}",
        ) from None
    for column, key in keys.items():
        value = stats.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(path, f"line {number}: stats[{key!r}] must be a number, found {str(value)[:40]!r}")
        try:
            row[column] = float(value)
        except OverflowError:  # a JSON integer beyond float range
            raise InputError(path, f"line {number}: stats[{key!r}] is out of range ({str(value)[:40]}...)") from None
    return row


def is_memory_stats(head: bytes) -> bool:
    """A memory-stats log: torch's ``memory_stats()`` or JAX's ``memory_stats()`` per line."""
    compact = compact_json(head)
    return compact is not None and (
        MEMORY_STATS_RECORD.mark in compact
        or '"allocated_bytes.all.current"' in compact
        or '"allocated_bytes":{"all":{' in compact  # torch.cuda.memory_stats_as_nested_dict()
        or '"bytes_in_use"' in compact
    )


READERS = (
    Reader(
        "memory-stats",
        MEMORY_STATS,
        is_memory_stats,
        read_memory_stats,
        "a memory-stats log (torch or JAX memory_stats() as JSON lines, or one memory_stats() saved as JSON)",
        (JSON,),
    ),
)
