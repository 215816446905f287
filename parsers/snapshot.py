"""Caching-allocator snapshots → typed tables: segments, blocks, the history trace, its frames.

Reads both forms a user has: torch's pickle from ``torch.cuda.memory._dump_snapshot``
(gzip-compressed or not), through :mod:`parsers.restricted_pickle` so nothing in it
runs, and gpudiag's JSON form written by ``gpudiag profile`` (``_snapshot()`` as JSON
plus ``"schema": "gpudiag.snapshot/1"``, gzip-compressed or not).

Frames are stored once: each distinct stack gets a ``stack_id``; ``stacks`` maps it
to its frame ids and to the innermost *user* line (``path:line``, the first Python
frame outside torch and site-packages), which is what a report names. A trace entry
carries only its ``stack_id`` and that ``location``.

Nothing here interprets the history (that is :mod:`diagnose.derive.memory_replay`): unknown
action names are kept as they are and listed in ``metadata["warnings"]``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.limits import check_json_nesting, check_rows, read_input
from parsers.reader import BINARY, JSON, SNAPSHOTS, Reader, compact_json
from parsers.restricted_pickle import loads_plain
from parsers.schema import BOOL, F64, I64, STR, Schema, conform
from parsers.unicode_text import without_lone_surrogates

SCHEMA_PREFIX = "gpudiag.snapshot/"
SUPPORTED_SCHEMA_VERSIONS = (1,)
SMALL_POOL_MAX_BLOCK_BYTES = 1 << 20  # torch kSmallSize: blocks up to 1 MiB come from the small pool
KNOWN_ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
)

SEGMENTS_SCHEMA = Schema(
    "memory_segments",
    {
        "device": I64,
        "address": I64,
        "total_size_bytes": I64,
        "allocated_bytes": I64,
        "active_bytes": I64,
        "requested_bytes": I64,
        "stream": I64,
        "pool": STR,
        "pool_id": STR,
        "is_expandable": BOOL,
        "block_count": I64,
    },
    docs={
        "address": "first byte of the segment (for expandable segments: of one contiguous mapped range)",
        "allocated_bytes": "sum of the sizes of allocated blocks (torch's allocated_size)",
        "active_bytes": "allocated plus freed-but-still-in-use-by-a-stream blocks",
        "requested_bytes": "sum of the sizes callers asked for, over active blocks",
        "pool": "'small' (2 MiB segments for blocks <= 1 MiB) or 'large'",
    },
)

BLOCKS_SCHEMA = Schema(
    "memory_blocks",
    {
        "device": I64,
        "segment_address": I64,
        "address": I64,
        "size_bytes": I64,
        "requested_bytes": I64,
        "state": STR,
        "stack_id": I64,
        "location": STR,
    },
    docs={
        "state": "active_allocated | active_pending_free | inactive (free)",
        "stack_id": "row of `stacks` (-1: no frames recorded)",
        "location": "innermost user frame, path:line",
    },
)

TRACE_SCHEMA = Schema(
    "memory_trace",
    {
        "device": I64,
        "seq": I64,
        "action": STR,
        "addr": I64,
        "size_bytes": I64,
        "stream": I64,
        "t_us": F64,
        "device_free_bytes": F64,
        "stack_id": I64,
        "location": STR,
    },
    docs={
        "seq": "position in the device's history (oldest first)",
        "size_bytes": "alloc/free: the size asked for; segment_*: the segment (or mapped range) size; oom: the failed request",
        "t_us": "unix epoch microseconds (torch's approximate clock)",
        "device_free_bytes": "oom only: free device memory the driver reported",
    },
)

STACKS_SCHEMA = Schema(
    "memory_stacks",
    {"stack_id": I64, "location": STR, "depth": I64, "python_stack": STR},
    docs={"python_stack": "the Python frames, innermost first, 'path:line function' joined by ' | '"},
)

FRAMES_SCHEMA = Schema("memory_frames", {"frame_id": I64, "filename": STR, "line": I64, "name": STR})

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/torch/", "/lib/python3")


@dataclass
class MemorySnapshot:
    """One allocator snapshot: state at the dump (segments, blocks) and the history before it (trace)."""

    segments: pd.DataFrame
    blocks: pd.DataFrame
    trace: pd.DataFrame
    stacks: pd.DataFrame
    frames: pd.DataFrame
    stack_frames: list[tuple[int, ...]] = field(default_factory=list)  # stack_id → frame ids, innermost first
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> list[int]:
        return sorted(set(self.segments["device"].tolist()) | set(self.trace["device"].tolist()))

    @property
    def has_history(self) -> bool:
        return len(self.trace) > 0

    def trace_for(self, device: int) -> pd.DataFrame:
        return self.trace[self.trace["device"] == device].reset_index(drop=True)

    def segments_for(self, device: int) -> pd.DataFrame:
        return self.segments[self.segments["device"] == device].reset_index(drop=True)

    def blocks_for(self, device: int) -> pd.DataFrame:
        return self.blocks[self.blocks["device"] == device].reset_index(drop=True)

    @property
    def warnings(self) -> list[str]:
        return self.metadata.setdefault("warnings", [])


def read_snapshot(path: str | os.PathLike) -> MemorySnapshot:
    """Read a torch snapshot pickle or a gpudiag snapshot JSON (either gzipped) into tables."""
    raw = _read_bytes(path)
    if raw[:1] == b"\x80":
        data = loads_plain(raw, path, "a torch memory snapshot (torch.cuda.memory._dump_snapshot)")
        check_rows(path, _row_count(data), len(raw))  # a pickle can reference one segment a million times
        source_format = "torch-pickle"
    else:
        data = _load_json(raw, path)
        source_format = "gpudiag-json"
    return snapshot_from_dict(data, path, source_format)


def snapshot_from_dict(data: Any, path: str | os.PathLike | None, source_format: str = "dict") -> MemorySnapshot:
    """Tables from the dict ``torch.cuda.memory._snapshot()`` returns (or its JSON/pickle copy)."""
    if not isinstance(data, dict):
        raise InputError(path, f"expected a memory snapshot (a dict with 'segments'), found a {type(data).__name__}")
    if "segments" not in data:
        raise InputError(path, f"expected a memory snapshot with 'segments'; found keys {sorted(map(str, data))[:8]}")
    schema = data.get("schema")
    if schema is not None:
        _check_schema(schema, path)
    interner = _StackInterner()
    warnings: list[str] = []
    segments, blocks = _segments_and_blocks(data["segments"], path, interner)
    trace = _trace(data.get("device_traces"), path, interner, warnings)
    settings = data.get("allocator_settings") if isinstance(data.get("allocator_settings"), dict) else {}
    metadata = {
        "path": None if path is None else os.fspath(path),
        "format": source_format,
        "schema": schema,
        "allocator_settings": settings,
        "expandable_segments": bool(settings.get("expandable_segments", False))
        or bool(segments["is_expandable"].any()),
        "external_annotations": len(ann) if isinstance(ann := data.get("external_annotations"), list) else 0,
        "warnings": warnings,
    }
    return MemorySnapshot(
        segments=segments,
        blocks=blocks,
        trace=trace,
        stacks=interner.stacks_table(),
        frames=interner.frames_table(),
        stack_frames=interner.stack_frames,
        metadata=metadata,
    )


def _read_bytes(path) -> bytes:
    try:
        raw = read_input(path)  # gunzipped, within the caps of parsers/limits.py
    except OSError as e:
        raise InputError(path, f"cannot read memory snapshot: {e.strerror}") from None
    if not raw:
        raise InputError(path, "is empty; expected a torch memory snapshot pickle or gpudiag snapshot JSON")
    return raw


def _row_count(data) -> int:
    """Rows the tables would get (segments, blocks, trace entries), from list lengths alone."""
    if not isinstance(data, dict):
        return 0
    segments = data.get("segments") if isinstance(data.get("segments"), list) else []
    traces = data.get("device_traces") if isinstance(data.get("device_traces"), list) else []
    return (
        len(segments)
        + sum(len(s["blocks"]) for s in segments if isinstance(s, dict) and isinstance(s.get("blocks"), list))
        + sum(len(t) for t in traces if isinstance(t, list))
    )


def _load_json(raw: bytes, path):
    check_json_nesting(raw, path)  # json.loads recurses once per level
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(
            path, f"expected a torch snapshot pickle or gpudiag snapshot JSON; it is neither ({e})"
        ) from None


def _check_schema(schema, path) -> None:
    text = str(schema)
    if not text.startswith(SCHEMA_PREFIX):
        raise InputError(path, f"expected schema '{SCHEMA_PREFIX}1', found {text!r}")
    try:
        version = int(text[len(SCHEMA_PREFIX) :])
    except ValueError:
        raise InputError(path, f"expected schema '{SCHEMA_PREFIX}1', found {text!r}") from None
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InputError(
            path, f"snapshot schema {text!r} is newer than this gpudiag reads ({SCHEMA_PREFIX}1); upgrade gpudiag"
        )


def _int(value, path, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(path, f"expected an integer for {where}, found {str(value)[:80]!r}")
    return _fold_int64(int(value), path, where)


def _fold_int64(value: int, path, where: str) -> int:
    """``value`` as int64: CUDA stream handles can be pointers above 2**63, kept as their signed twin.

    Anything beyond 64 bits (a fuzzed or damaged file) is an InputError, not an OverflowError later.
    """
    if -(1 << 63) <= value < (1 << 63):
        return value
    if (1 << 63) <= value < (1 << 64):
        return value - (1 << 64)
    raise InputError(path, f"expected a 64-bit integer for {where}, found {value}")


def _segments_and_blocks(raw_segments, path, interner: _StackInterner) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not isinstance(raw_segments, list):
        raise InputError(path, f"expected 'segments' to be a list, found {type(raw_segments).__name__}")
    seg_rows, block_rows = [], []
    for i, seg in enumerate(raw_segments):
        if not isinstance(seg, dict) or "address" not in seg or "total_size" not in seg:
            raise InputError(
                path, f"segment {i}: expected a dict with 'address' and 'total_size', found {str(seg)[:80]!r}"
            )
        device = _int(seg.get("device", 0), path, f"segment {i} 'device'")
        address = _int(seg["address"], path, f"segment {i} 'address'")
        blocks = seg.get("blocks") or []
        if not isinstance(blocks, list):
            raise InputError(path, f"segment {i}: expected 'blocks' to be a list")
        kind = seg.get("segment_type")
        for j, blk in enumerate(blocks):
            if not isinstance(blk, dict) or "size" not in blk:
                raise InputError(path, f"segment {i} block {j}: expected a dict with 'size'")
            stack_id = interner.stack_id(blk.get("frames"))
            block_rows.append(
                (
                    device,
                    address,
                    _int(blk.get("address", address), path, f"segment {i} block {j} 'address'"),
                    _int(blk["size"], path, f"segment {i} block {j} 'size'"),
                    _int(blk.get("requested_size", blk["size"]), path, f"segment {i} block {j} 'requested_size'"),
                    _text(blk.get("state", "")),
                    stack_id,
                )
            )
        pool_id = seg.get("segment_pool_id")
        seg_rows.append(
            {
                "device": device,
                "address": address,
                "total_size_bytes": _int(seg["total_size"], path, f"segment {i} 'total_size'"),
                "allocated_bytes": _int(seg.get("allocated_size", 0), path, f"segment {i} 'allocated_size'"),
                "active_bytes": _int(seg.get("active_size", 0), path, f"segment {i} 'active_size'"),
                "requested_bytes": _int(seg.get("requested_size", 0), path, f"segment {i} 'requested_size'"),
                "stream": _int(seg.get("stream", 0) or 0, path, f"segment {i} 'stream'"),
                "pool": kind if kind in ("small", "large") else _pool_of_size(int(seg["total_size"])),
                "pool_id": None
                if pool_id is None
                else _text(",".join(map(str, pool_id)) if isinstance(pool_id, (list, tuple)) else pool_id),
                "is_expandable": bool(seg.get("is_expandable", False)),
                "block_count": len(blocks),
            }
        )
    segments = conform(pd.DataFrame(seg_rows, columns=list(SEGMENTS_SCHEMA.columns)), SEGMENTS_SCHEMA)
    segments = segments.sort_values(["device", "address"], kind="stable").reset_index(drop=True)
    columns = ["device", "segment_address", "address", "size_bytes", "requested_bytes", "state", "stack_id"]
    blocks = pd.DataFrame(block_rows, columns=columns)
    blocks["location"] = interner.locations_of(blocks["stack_id"].to_numpy(dtype=np.int64))
    return segments, conform(blocks, BLOCKS_SCHEMA)


def _pool_of_size(segment_bytes: int) -> str:
    return "small" if segment_bytes <= 2 * SMALL_POOL_MAX_BLOCK_BYTES else "large"


def _trace(device_traces, path, interner: _StackInterner, warnings: list[str]) -> pd.DataFrame:
    if device_traces is None:
        warnings.append(
            "the snapshot has no allocator history (no 'device_traces'): record it with "
            "torch.cuda.memory._record_memory_history() before the run, or use `gpudiag profile`"
        )
        return TRACE_SCHEMA.empty()
    if not isinstance(device_traces, list):
        raise InputError(
            path, f"expected 'device_traces' to be a list (one per device), found {type(device_traces).__name__}"
        )
    cols: dict[str, list] = {
        k: []
        for k in ("device", "seq", "action", "addr", "size_bytes", "stream", "t_us", "device_free_bytes", "stack_id")
    }
    unknown: dict[str, int] = {}
    stack_id = interner.stack_id
    for device, entries in enumerate(device_traces):
        if not isinstance(entries, list):
            raise InputError(
                path, f"device_traces[{device}]: expected a list of entries, found {type(entries).__name__}"
            )
        a_device, a_seq, a_action = cols["device"], cols["seq"], cols["action"]
        a_addr, a_size, a_stream, a_t = cols["addr"], cols["size_bytes"], cols["stream"], cols["t_us"]
        a_free, a_stack = cols["device_free_bytes"], cols["stack_id"]
        for seq, e in enumerate(entries):
            try:
                action = e["action"]
                addr = e.get("addr", 0)
                size = e.get("size", 0)
                t = e.get("time_us")
                a_addr.append(int(addr))
                a_size.append(int(size))
                a_stream.append(int(e.get("stream", 0) or 0))
            except (TypeError, KeyError, ValueError, AttributeError, OverflowError):  # OverflowError: int(inf)
                raise InputError(
                    path,
                    f"device_traces[{device}][{seq}]: expected a dict with 'action', 'addr' and "
                    f"'size' (integers), found {str(e)[:120]!r}",
                ) from None
            if action not in KNOWN_ACTIONS:
                action = _text(action)
                unknown[action] = unknown.get(action, 0) + 1
            a_device.append(device)
            a_seq.append(seq)
            a_action.append(action)
            a_t.append(np.nan if t is None else t)
            a_free.append(e.get("device_free", np.nan))
            a_stack.append(stack_id(e.get("frames")))
        if not entries:
            continue
    if not cols["seq"]:
        warnings.append(
            "the snapshot's allocator history is empty (recording was on but nothing was allocated, "
            "or it was switched off before the run)"
        )
    if unknown:
        listed = ", ".join(f"{name!r} ×{n}" for name, n in sorted(unknown.items()))
        warnings.append(f"unknown allocator history actions kept but not replayed: {listed}")
    trace = pd.DataFrame(
        {
            "device": np.asarray(cols["device"], dtype=np.int64),
            "seq": np.asarray(cols["seq"], dtype=np.int64),
            "action": pd.Series(cols["action"], dtype=object),
            "addr": _int64_array(cols["addr"], path, "addr"),
            "size_bytes": _int64_array(cols["size_bytes"], path, "size"),
            "stream": _int64_array(cols["stream"], path, "stream"),
            "t_us": pd.to_numeric(pd.Series(cols["t_us"], dtype=object), errors="coerce").astype(float),
            "device_free_bytes": pd.to_numeric(
                pd.Series(cols["device_free_bytes"], dtype=object), errors="coerce"
            ).astype(float),
            "stack_id": np.asarray(cols["stack_id"], dtype=np.int64),
        }
    )
    trace["location"] = interner.locations_of(trace["stack_id"].to_numpy())
    return conform(trace, TRACE_SCHEMA)


def _int64_array(values: list, path, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        return np.asarray([_fold_int64(v, path, f"'{name}' in device_traces") for v in values], dtype=np.int64)


class _StackInterner:
    """Gives each distinct frame list one stack id and each distinct frame one frame id."""

    _frame_key = itemgetter("filename", "line", "name")

    def __init__(self) -> None:
        self._by_object: dict[int, int] = {}  # id(frames list) → stack id (pickles share identical lists)
        self._by_content: dict[tuple, int] = {}
        self._frame_ids: dict[tuple, int] = {}
        self._keep_alive: list = []
        self.stack_frames: list[tuple[int, ...]] = []
        self._locations: list[str | None] = []
        self._python_stacks: list[str] = []

    def stack_id(self, frames) -> int:
        if not frames or not isinstance(frames, (list, tuple)):  # no frames, or something that is not a list of them
            return -1
        hit = self._by_object.get(id(frames))
        if hit is not None:
            return hit
        try:
            key = tuple(map(self._frame_key, frames))
            hash(key)  # a frame's filename or name that is a list or dict cannot key the interner
        except (TypeError, KeyError):
            key = tuple((str(f.get("filename", "")) if isinstance(f, dict) else "", 0, str(f)) for f in frames)
        sid = self._by_content.get(key)
        if sid is None:
            sid = len(self.stack_frames)
            self._by_content[key] = sid
            ids = []
            for frame in key:
                fid = self._frame_ids.get(frame)
                if fid is None:
                    fid = self._frame_ids[frame] = len(self._frame_ids)
                ids.append(fid)
            self.stack_frames.append(tuple(ids))
            location, python_stack = _user_location(key)
            self._locations.append(location)
            self._python_stacks.append(python_stack)
        self._by_object[id(frames)] = sid
        self._keep_alive.append(frames)  # the id stays unique only while the list lives
        return sid

    def locations_of(self, stack_ids: np.ndarray) -> np.ndarray:
        table = np.asarray(self._locations + [None], dtype=object)  # index -1 → None
        return table[np.asarray(stack_ids, dtype=np.int64)]

    def stacks_table(self) -> pd.DataFrame:
        return conform(
            pd.DataFrame(
                {
                    "stack_id": np.arange(len(self.stack_frames), dtype=np.int64),
                    "location": pd.Series(self._locations, dtype=object),
                    "depth": [len(s) for s in self.stack_frames],
                    "python_stack": pd.Series(self._python_stacks, dtype=object),
                }
            ),
            STACKS_SCHEMA,
        )

    def frames_table(self) -> pd.DataFrame:
        keys = list(self._frame_ids)
        return conform(
            pd.DataFrame(
                {
                    "frame_id": np.arange(len(keys), dtype=np.int64),
                    "filename": [_text(k[0]) for k in keys],
                    "line": [_line(k[1]) for k in keys],
                    "name": [_text(k[2]) for k in keys],
                }
            ),
            FRAMES_SCHEMA,
        )


def _line(value) -> int:
    """A frame's line number, 0 when it is not one (text, NaN, inf, beyond int64)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return int(value) if ok and abs(value) < (1 << 63) else 0


def _text(value) -> str:
    """``str(value)`` that a table and the UTF-8 report can hold (a lone surrogate becomes U+FFFD)."""
    return without_lone_surrogates(value if isinstance(value, str) else str(value))


def _user_location(frames: tuple) -> tuple[str | None, str]:
    """(innermost user 'path:line', the Python frames as text) of one stack, innermost first."""
    python = [(_text(f), line, _text(name)) for f, line, name in frames if isinstance(f, str) and f.endswith(".py")]
    user = next((p for p in python if not any(m in p[0] for m in _LIBRARY_MARKERS)), None)
    chosen = user or (python[0] if python else None)
    location = None if chosen is None else _frame_place(*chosen)
    return location, " | ".join(f"{_frame_place(f, line, name)} {name}" for f, line, name in python[:12])


def _frame_place(path: str, line, name: str) -> str:
    """'path:line', or 'name() in path' when the frame has no line (0, or not a line number: a mutated or broken
    file) that a user could open."""
    n = _line(line)
    return f"{path}:{n}" if n > 0 else f"{name}() in {path}"


def is_snapshot_pickle(head: bytes) -> bool:
    """A pickle (protocol 2 or later): what ``torch.cuda.memory._dump_snapshot`` writes."""
    return head[:1] == b"\x80"


def is_snapshot_json(head: bytes) -> bool:
    """A snapshot as JSON: the pickle's dict written as JSON, or gpudiag's own form."""
    compact = compact_json(head)
    return compact is not None and (
        '"segments"' in compact or '"device_traces"' in compact or '"gpudiag.snapshot' in compact
    )


READERS = (
    Reader(
        "snapshot-pickle",
        SNAPSHOTS,
        is_snapshot_pickle,
        read_snapshot,
        "a torch memory snapshot pickle (torch.cuda.memory._dump_snapshot)",
        (BINARY,),
    ),
    Reader("snapshot-json", SNAPSHOTS, is_snapshot_json, read_snapshot, "a memory snapshot as JSON", (JSON,)),
)
