"""Turn a path into a :class:`Profile`: a run folder, or one artifact detected by content.

The extension is never trusted: a `.json` may be a Kineto trace, a memory
snapshot in gpudiag's JSON form or a findings file; a `.gz` is opened and
sniffed again. Each kind is read by its parser in :mod:`parsers`.
"""
from __future__ import annotations

import gzip
import zlib
import os
import re
import warnings
from pathlib import Path

from diagnose.profile_data import Profile
from parsers.errors import InputError
from parsers.limits import require_regular_file

SNIFF_BYTES = 64 * 1024

# artifact kinds this module can tell apart
NCU_REP = "ncu-rep"
NCU_CSV = "ncu-csv"
TRACE = "trace"
SNAPSHOT_PICKLE = "snapshot-pickle"
SNAPSHOT_JSON = "snapshot-json"
MEMORY_STATS = "memory-stats"
EVENTS = "events"
NVML = "nvml"
RUN_FOLDER = "run-folder"

_RANK = re.compile(r"rank(\d+)")


def sniff(path: str | os.PathLike) -> str:
    """The kind of artifact at ``path``, from its first bytes."""
    path = Path(path)
    if path.is_dir():
        if (path / "manifest.json").exists():
            return RUN_FOLDER
        raise InputError(path, "is a folder but not a gpudiag run folder (no manifest.json in it)")
    require_regular_file(path)  # a FIFO or /dev/zero would block or never end
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    if not head:
        raise InputError(path, "is empty; expected an ncu report or CSV, a profiler trace, a memory snapshot or a run folder")
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(path, f"is gzip-compressed but cannot be decompressed: {e}") from None
        if not head:
            raise InputError(path, "is a gzip file with nothing in it")
    return _sniff_bytes(path, head)


def _sniff_bytes(path: Path, head: bytes) -> str:
    if head[:4] == b"NVR\x00":
        return NCU_REP
    if head[:1] == b"\x80":
        return SNAPSHOT_PICKLE
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    if text.startswith("{") or text.startswith("["):
        compact = re.sub(r"\s+", "", text[:SNIFF_BYTES])
        if '"traceEvents"' in compact or '"schemaVersion"' in compact or '"displayTimeUnit"' in compact:
            return TRACE
        if '"segments"' in compact or '"device_traces"' in compact or '"gpudiag.snapshot' in compact:
            return SNAPSHOT_JSON
        if '"kind":"step"' in compact or '"kind":"sync"' in compact or '"kind":"run"' in compact:
            return EVENTS
        if compact.startswith("[{") and '"step":' in compact and ('"elapsed_ms":' in compact or '"end_ms":' in compact):
            return EVENTS  # a user's JSON list of step timings (docs/step-timings.md)
        if '"kind":"memory_stats"' in compact or '"allocated_bytes.all.current"' in compact or '"bytes_in_use"' in compact:
            return MEMORY_STATS
        raise InputError(path, "is JSON but not a profiler trace, memory snapshot, event log or memory-stats log gpudiag knows")
    if '"ID","Process ID"' in text or "==PROF==" in text or '"Kernel Name"' in text:
        return NCU_CSV
    first = text.splitlines()[0] if text else ""
    if first.startswith("t_ns,") and "gpu_util_pct" in first:
        return NVML
    if first.startswith("name,") or first.startswith("step,"):
        return EVENTS
    if "\x00" in text[:4096]:
        raise InputError(path, "is a binary file of an unknown format; expected .ncu-rep, a snapshot pickle or a gzip")
    raise InputError(path, "is not a format gpudiag reads: expected ncu CSV (--csv --page raw|details), "
                           "a .ncu-rep, a Kineto/JAX trace, a torch memory snapshot, or a run folder")


def rank_of(path: str | os.PathLike, default: int = 0) -> int:
    m = _RANK.search(Path(path).name)
    return int(m.group(1)) if m else default


def load(path: str | os.PathLike) -> Profile:
    """Read a run folder or a single artifact into a Profile."""
    kind = sniff(path)
    if kind == RUN_FOLDER:
        return load_run_folder(path)
    profile = Profile(sources=[os.fspath(path)])
    add_artifact(profile, path, kind)
    return profile


def add_artifact(profile: Profile, path: str | os.PathLike, kind: str | None = None, rank: int | None = None) -> None:
    """Read one artifact into the matching table(s) of ``profile``; a reader's warning (a cut last line)
    becomes one of ``profile.warnings``, which the report shows."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        _add_artifact(profile, path, kind, rank)
    profile.warnings.extend(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))


def _add_artifact(profile: Profile, path, kind: str | None, rank: int | None) -> None:
    kind = kind or sniff(path)
    rank = rank_of(path) if rank is None else rank
    if kind in (NCU_REP, NCU_CSV):
        from parsers.ncu import read_ncu

        import pandas as pd

        kernels = read_ncu(path)
        profile.kernels = kernels if not len(profile.kernels) else pd.concat([profile.kernels, kernels], ignore_index=True)
    elif kind == TRACE:
        from parsers.trace import read_trace

        trace = read_trace(path)
        rank = trace.rank if getattr(trace, "rank", None) is not None else rank
        profile.traces[rank] = trace
    elif kind in (SNAPSHOT_PICKLE, SNAPSHOT_JSON):
        from parsers.snapshot import read_snapshot

        profile.snapshots[rank] = read_snapshot(path)
    elif kind == MEMORY_STATS:
        from parsers.memory_stats import read_memory_stats

        profile.memory_stats[rank] = read_memory_stats(path)
    elif kind == EVENTS:
        from parsers.events import read_events

        steps, syncs = read_events(path)
        profile.step_events[rank] = steps
        if len(syncs):
            profile.sync_records[rank] = syncs
    elif kind == NVML:
        from parsers.nvml import read_nvml

        profile.nvml = read_nvml(path)
    else:  # pragma: no cover - sniff only returns the kinds above
        raise InputError(path, f"unsupported artifact kind {kind}")
    if os.fspath(path) not in profile.sources:
        profile.sources.append(os.fspath(path))


def load_run_folder(folder: str | os.PathLike) -> Profile:
    """Read every artifact the manifest lists (or the layout holds) that finished writing."""
    from diagnose.launch.run_manifest import report_notes
    from parsers.manifest import read_manifest

    folder = Path(folder)
    manifest = read_manifest(folder / "manifest.json")
    profile = Profile(sources=[os.fspath(folder)], manifest=manifest)
    candidates = []
    ncu_rep = folder / "ncu" / "report.ncu-rep"
    ncu_csv = folder / "ncu" / "raw.csv"
    if ncu_rep.exists() and _ncu_report_available():
        candidates.append(ncu_rep)
    elif ncu_csv.exists():
        candidates.append(ncu_csv)
    elif ncu_rep.exists():
        candidates.append(ncu_rep)  # gives the clear "install ncu-report" error
    for sub, pattern in (("trace", "rank*.json*"), ("memory", "rank*.snapshot.*"), ("memory", "rank*.stats.jsonl"),
                         ("events", "rank*.jsonl")):
        candidates.extend(sorted((folder / sub).glob(pattern)))
    if (folder / "nvml.csv").exists():
        candidates.append(folder / "nvml.csv")
    for path in candidates:
        if path.name.endswith(".tmp") or ".tmp." in path.name:
            continue
        try:
            kind = sniff(path)
            add_artifact(profile, path, kind)
        except InputError as e:
            profile.warnings.append(str(e))
    # how the run ended, and what is missing or cut short with the reason the manifest gives
    profile.warnings.extend(report_notes(manifest))
    return profile


def _ncu_report_available() -> bool:
    try:
        import ncu_report  # noqa: F401
    except ImportError:
        return False
    return True
