"""The run folder `gpudiag profile` writes: its manifest and what the loader reads from it.

Its layout (DESIGN.md, docs/run-folder.md) and its records are defined once, in :mod:`parsers.run_records`, which the
runtime inside the training process loads too; this module re-exports the layout's names the launcher uses::

    manifest.json                      schema gpudiag.run/1: command, exit, host, GPUs, artifacts, faults
    events/rank<N>.jsonl               step, sync, work and run records
    memory/rank<N>.stats.jsonl         allocator stats now and then
    memory/rank<N>.snapshot.json.gz    allocator history
    trace/rank<N>.json.gz              profiler trace window
    nvml.csv                           NVML samples
    ncu/report.ncu-rep, ncu/raw.csv    under --ncu (ncu/ncu.log is ncu's console)
    ncu/launch_starts.csv              under --ncu: when each profiled launch started (from ncu's log)

The launcher (diagnose/launch) writes it through these names; the loader (diagnose/ingest/loading.py) reads it
through :func:`artifact_paths`. Temporary files (``*.tmp``) are what a killed writer left behind;
they never count as artifacts. The manifest is validated by :func:`read_manifest` (callers never
meet None in its lists and objects) and turned into the report's notes by :func:`report_notes`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path

from parsers.errors import InputError
from parsers.limits import read_input
from parsers.run_records import (  # noqa: F401  (the layout's names the launcher and the loader take from here)
    ARTIFACT_PATTERNS,
    EVENTS,
    MANIFEST,
    MANIFEST_SCHEMA,
    MANIFEST_SCHEMA_PREFIX,
    MEMORY_STATS,
    NCU_FOLDER,
    NCU_LAUNCH_STARTS,
    NCU_LOG,
    NCU_PARTIAL_REPORT,
    NCU_RAW_CSV,
    NCU_REPORT,
    NVML_CSV,
    RANK_PATTERNS,
    RUN,
    RUN_EXPECT,
    RUN_START,
    SNAPSHOT,
    TRACE,
    kind_mark,
)
from parsers.unicode_text import without_lone_surrogates

SUPPORTED_MAJOR = 1
_LISTS = ("gpus", "ranks", "missing", "notes", "command", "faults")
_DICTS = ("artifacts", "unavailable", "versions", "host", "options", "missing_reasons", "incomplete")
_RANK = re.compile(r"rank[-_]?(\d+)")  # rank3, and rank-3 / rank_3 as HTA's and other tools' files name it


# ---- layout --------------------------------------------------------------------------------------


def is_run_folder(path: str | os.PathLike) -> bool:
    path = Path(path)
    return path.is_dir() and (path / MANIFEST).exists()


def rank_of(path: str | os.PathLike, default: int = 0) -> int:
    """The rank in an artifact's name (``rank3.json.gz``, ``trace_rank-3.json.gz`` → 3), else ``default``."""
    m = _RANK.search(Path(path).name)
    return int(m.group(1)) if m else default


def is_temporary(path: Path) -> bool:
    return path.name.endswith(".tmp") or ".tmp." in path.name


def artifacts(folder: str | os.PathLike) -> dict[str, int]:
    """Every finished artifact in the folder, relative path → size in bytes."""
    folder = Path(folder)
    found = {}
    for pattern in ARTIFACT_PATTERNS:
        for path in sorted(folder.glob(pattern)):
            if path.is_file() and not path.name.endswith(".tmp"):
                found[path.relative_to(folder).as_posix()] = path.stat().st_size
    return found


def artifact_paths(folder: str | os.PathLike) -> list[Path]:
    """The files the loader reads, in order: the ncu report (its raw CSV where ``ncu_report`` is not
    installed), each rank's trace, snapshot, memory stats and events, then the NVML samples."""
    folder = Path(folder)
    paths = []
    ncu_rep, ncu_csv = folder / NCU_REPORT, folder / NCU_RAW_CSV
    if ncu_rep.exists() and _ncu_report_available():
        paths.append(ncu_rep)
    elif ncu_csv.exists():
        paths.append(ncu_csv)
    elif ncu_rep.exists():
        paths.append(ncu_rep)  # gives the clear "install ncu-report" error
    for pattern in RANK_PATTERNS:
        paths.extend(sorted(folder.glob(pattern)))
    for single in (NCU_LAUNCH_STARTS, NVML_CSV):
        if (folder / single).exists():
            paths.append(folder / single)
    return [p for p in paths if not is_temporary(p)]


def _ncu_report_available() -> bool:
    try:
        import ncu_report  # noqa: F401
    except ImportError:
        return False
    return True


# ---- what the processes of a run recorded about themselves ----------------------------------------


def read_child_records(folder: str | os.PathLike) -> list[dict]:
    """The children's ``{"kind": "run"}`` records (start, expect, end), from every events file."""
    records = []
    for path in sorted(Path(folder).glob(EVENTS.pattern)):
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if kind_mark(RUN) not in line:
                        continue
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        continue  # a line cut short by a kill
        except OSError:
            continue
    return records


def expected_artifacts(child_records: list[dict], parent_expected: list[str]) -> list[str]:
    """What should be there: rank 0's (and every rank's of the world size) events, what children announced,
    and what the parent itself meant to write."""
    expected = set(parent_expected)
    expected.add(EVENTS.path(0))
    for record in child_records:
        if record.get("event") == RUN_START.event and isinstance(record.get("world_size"), int):
            expected.update(EVENTS.path(r) for r in range(record["world_size"]))
        if record.get("event") == RUN_EXPECT.event and record.get("artifact"):
            expected.add(str(record["artifact"]))
    return sorted(expected)


def ranks(child_records: list[dict], present: dict[str, int]) -> list[int]:
    found = {
        int(r["rank"]) for r in child_records if r.get("event") == RUN_START.event and isinstance(r.get("rank"), int)
    }
    for path in present:
        m = _RANK.search(path)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


# ---- the manifest ---------------------------------------------------------------------------------


def read_manifest(path: str | os.PathLike) -> dict:
    """A run's manifest.json, validated; optional lists and objects filled so callers never meet None."""
    try:
        raw = read_input(path, json=True, gunzip=False)  # within the caps of parsers/limits.py
    except FileNotFoundError:
        raise InputError(
            path,
            "no manifest.json: not a gpudiag run folder, or `gpudiag profile` was killed before it started the run",
        ) from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text; expected the JSON manifest gpudiag profile writes") from None
    except ValueError as e:
        raise InputError(path, f"is not valid JSON ({e}); expected the manifest gpudiag profile writes") from None
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object, found {type(data).__name__}")
    if b"\\ud" in raw or b"\\uD" in raw:
        data = _without_lone_surrogates(data)
    schema = data.get("schema")
    if not isinstance(schema, str) or not schema.startswith(MANIFEST_SCHEMA_PREFIX):
        raise InputError(path, f"expected schema {MANIFEST_SCHEMA_PREFIX}{SUPPORTED_MAJOR}, found {schema!r}")
    try:
        major = int(schema[len(MANIFEST_SCHEMA_PREFIX) :].split(".")[0])
    except ValueError:
        raise InputError(path, f"unreadable schema version {schema!r}") from None
    if major != SUPPORTED_MAJOR:
        raise InputError(
            path,
            f"schema {schema} is not supported by this gpudiag (reads "
            f"{MANIFEST_SCHEMA_PREFIX}{SUPPORTED_MAJOR}); upgrade gpudiag",
        )
    for key in _LISTS:
        value = data.get(key)
        if value is None:
            data[key] = []
        elif not isinstance(value, list):
            raise InputError(path, f"field {key!r} should be a list, found {type(value).__name__}")
    for key in _DICTS:
        value = data.get(key)
        if value is None:
            data[key] = {}
        elif not isinstance(value, dict):
            raise InputError(path, f"field {key!r} should be an object, found {type(value).__name__}")
    if not all(isinstance(m, str) for m in data["missing"]):
        raise InputError(path, "field 'missing' should list artifact paths (strings)")
    if not all(isinstance(g, dict) for g in data["gpus"]):
        raise InputError(path, "field 'gpus' should list objects with at least a 'name'")
    exit_code = data.get("exit_code")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
        raise InputError(path, f"field 'exit_code' should be an integer or null, found {exit_code!r}")
    return data


def _without_lone_surrogates(value):
    """The manifest with each lone surrogate (a ``\\udce9`` escape) in its text replaced by U+FFFD.

    json.dumps writes one for a command-line argument or path that was not UTF-8 (Python decodes
    those with surrogateescape); such a string cannot be printed or written to the UTF-8 report,
    so `gpudiag report` would stop with a UnicodeEncodeError. Found by fuzzing run folders.
    """
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def report_notes(manifest: dict) -> list[str]:
    """What ``gpudiag report`` says it cannot show, from a run's manifest: how the run ended, what is
    missing and what is cut short, each with its reason."""
    notes = []
    status = manifest.get("status")
    if status == "running":
        notes.append(
            "the manifest still says 'running': gpudiag itself was stopped (or could not write its final "
            "manifest) before the run ended, so its exit code and its list of artifacts are unknown"
        )
    elif status == "signal":
        who = "ncu" if manifest.get("mode") == "ncu" else "the script"
        notes.append(
            f"{who} was killed by {manifest.get('signal')} (exit code {manifest.get('exit_code')}); what "
            "was not finished by then is missing or cut short"
        )
    reasons = manifest.get("missing_reasons") or {}
    for path in manifest.get("missing") or []:
        notes.append(f"{path} is missing: {reasons.get(path, 'the run did not finish writing it')}")
    for path, why in sorted((manifest.get("incomplete") or {}).items()):
        notes.append(f"{path} is incomplete: {why}")
    return notes


# what a report lacks when an artifact the manifest lists is gone, by the artifact's path (first match)
_LOST_WITHOUT = (
    (
        f"{TRACE.prefix}*",
        "no profiler trace for rank {rank}: its kernels, GPU idle time, host syncs and launches are not in this report",
    ),
    (
        SNAPSHOT.read_pattern,
        "no allocator history for rank {rank}: which lines allocate the memory is not in this report",
    ),
    (f"{MEMORY_STATS.prefix}*", "no per-step allocator stats for rank {rank}"),
    (f"{EVENTS.prefix}*", "no per-step timings for rank {rank}"),
    (NVML_CSV, "no NVML samples: GPU utilisation, clocks and power are not in this report"),
    (f"{NCU_FOLDER}/*", "no Nsight Compute kernel metrics"),
)
# an artifact whose content another file of the run also holds: read that one instead
_READ_INSTEAD = {NCU_REPORT: (NCU_RAW_CSV, "ncu's raw CSV export of the same capture")}


def absent_artifacts(folder: str | os.PathLike, manifest: dict) -> list[str]:
    """What the manifest lists as written (``artifacts``) that is not in the folder: removed since, or not copied
    with it. What the run itself did not finish is the manifest's ``missing`` (:func:`report_notes`)."""
    folder = Path(folder)
    written = manifest.get("artifacts") or {}
    already_said = set(manifest.get("missing") or [])
    return sorted(p for p in written if isinstance(p, str) and p not in already_said and not _exists(folder / p))


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a name no file can have (a NUL byte, too long: a damaged manifest) does not."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def absent_notes(folder: str | os.PathLike, manifest: dict) -> list[str]:
    """One note per artifact the manifest lists but the folder lacks: what is missing, and what was read
    instead (ncu's raw CSV for a removed .ncu-rep) or what the report cannot show without it."""
    folder = Path(folder)
    notes = []
    for path in absent_artifacts(folder, manifest):
        size = manifest["artifacts"].get(path)
        listed = f" ({_size_text(size)})" if isinstance(size, int) and not isinstance(size, bool) else ""
        note = f"{path} is listed in the manifest{listed} but is not in the folder (removed, or not copied with it)"
        instead = _READ_INSTEAD.get(path)
        if instead and (folder / instead[0]).is_file():
            note += f"; read {instead[0]}, {instead[1]}, instead"
        else:
            lost = next((what for pattern, what in _LOST_WITHOUT if fnmatch.fnmatchcase(path, pattern)), None)
            note += f"; {lost.format(rank=rank_of(path))}" if lost else ""
        notes.append(note)
    return notes


def _size_text(size_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} byte{'s' if size_bytes != 1 else ''}"
