"""The run folder: its default name, its layout, and what in it finished writing.

Layout (DESIGN.md, docs/run-folder.md): manifest.json, events/rank<N>.jsonl,
memory/rank<N>.stats.jsonl, memory/rank<N>.snapshot.json.gz, trace/rank<N>.json.gz,
nvml.csv, ncu/report.ncu-rep, ncu/raw.csv. Temporary files (``*.tmp``) are what a
killed writer left behind; they never count as artifacts.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

DEFAULT_PARENT = "gpudiag-runs"
MANIFEST = "manifest.json"
NVML_CSV = "nvml.csv"
NCU_REPORT = "ncu/report.ncu-rep"
NCU_RAW_CSV = "ncu/raw.csv"
NCU_LOG = "ncu/ncu.log"
NCU_PARTIAL_REPORT = "ncu/report.partial.ncu-rep"  # what a killed ncu left: kept, never read as the report

ARTIFACT_PATTERNS = ("events/rank*.jsonl", "memory/rank*.stats.jsonl", "memory/rank*.snapshot.json.gz",
                     "trace/rank*.json.gz", NVML_CSV, NCU_REPORT, NCU_RAW_CSV)
_LAUNCHERS = {"torchrun", "python", "python3", "accelerate", "deepspeed", "uv", "poetry", "pipenv", "mpirun",
              "srun", "env", "launch", "run", "exec"}


def script_name(command: list[str]) -> str:
    """A short name for the run from the command: the script's stem, the -m module, or the program."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1]
        if arg.endswith(".py") and not arg.startswith("-"):
            return Path(arg).stem
    for arg in command:
        base = os.path.basename(arg)
        if not arg.startswith("-") and not re.fullmatch(r"python[\d.]*", base) and base not in _LAUNCHERS:
            return base
    return os.path.basename(command[0]) if command else "run"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


def new_run_folder(command: list[str], out: str | os.PathLike | None = None, parent: str = DEFAULT_PARENT) -> Path:
    """Create the run folder: ``out`` as given, else gpudiag-runs/<YYYYmmdd-HHMMSS>-<script>/ (suffixed when taken)."""
    if out is not None:
        folder = Path(out)
        if folder.exists() and any(folder.iterdir()):
            from parsers.errors import InputError

            raise InputError(folder, "already exists and is not empty; choose a new --out folder")
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(parent) / f"{stamp}-{_safe(script_name(command))}"
    folder, n = base, 1
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=False)
            return folder
        except FileExistsError:
            n += 1
            folder = base.with_name(f"{base.name}-{n}")


def artifacts(folder: str | os.PathLike) -> dict[str, int]:
    """Every finished artifact in the folder, relative path → size in bytes."""
    folder = Path(folder)
    found = {}
    for pattern in ARTIFACT_PATTERNS:
        for path in sorted(folder.glob(pattern)):
            if path.is_file() and not path.name.endswith(".tmp"):
                found[path.relative_to(folder).as_posix()] = path.stat().st_size
    return found


def remove_leftovers(folder: str | os.PathLike) -> list[str]:
    """Delete the ``*.tmp`` files killed writers left (call once the job has ended); their relative paths."""
    folder = Path(folder)
    removed = []
    for path in sorted(folder.rglob("*.tmp")):
        try:
            if path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(path.relative_to(folder).as_posix())
        except OSError:
            continue
    return removed


def read_child_records(folder: str | os.PathLike) -> list[dict]:
    """The children's ``{"kind": "run"}`` records (start, expect, end), from every events file."""
    records = []
    for path in sorted(Path(folder).glob("events/rank*.jsonl")):
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if '"kind":"run"' not in line:
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
    expected.add("events/rank0.jsonl")
    for record in child_records:
        if record.get("event") == "start" and isinstance(record.get("world_size"), int):
            expected.update(f"events/rank{r}.jsonl" for r in range(record["world_size"]))
        if record.get("event") == "expect" and record.get("artifact"):
            expected.add(str(record["artifact"]))
    return sorted(expected)


def ranks(child_records: list[dict], present: dict[str, int]) -> list[int]:
    found = {int(r["rank"]) for r in child_records if r.get("event") == "start" and isinstance(r.get("rank"), int)}
    for path in present:
        m = re.search(r"rank(\d+)", path)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)
