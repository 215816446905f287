"""manifest.json: what ran, on what, how it ended, and which artifacts exist or are missing.

Written twice, whole each time (temporary name + rename): at the start with
``"status": "running"`` and no exit code, and at the end. A run whose manifest still says
"running" was killed with its parent. Fields: docs/run-folder.md (schema gpudiag.run/1).
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from diagnose._io import atomic_write_text
from diagnose.launch import environment, run_folder

SCHEMA = "gpudiag.run/1"


def iso(t_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_ns / 1e9)) + f".{t_ns // 1_000_000 % 1000:03d}" \
        + time.strftime("%z", time.localtime(t_ns / 1e9))


def status_of(exit_code: int | None) -> tuple[str, str | None]:
    """("running" | "ok" | "failed" | "signal", signal name or None)."""
    if exit_code is None:
        return "running", None
    if exit_code == 0:
        return "ok", None
    if exit_code > 128:
        try:
            return "signal", signal.Signals(exit_code - 128).name
        except ValueError:
            pass
    return "failed", None


def start_manifest(command: list[str], mode: str, options: dict, start_ns: int) -> dict:
    gpus, driver, nvml_reason = environment.gpu_info()
    manifest = {
        "schema": SCHEMA, "mode": mode, "command": list(command), "cwd": os.getcwd(),
        "status": "running", "exit_code": None, "signal": None,
        "start": iso(start_ns), "start_ns": start_ns, "end": None, "end_ns": None, "duration_s": None,
        "host": environment.host_info(), "gpus": gpus,
        "driver_version": driver.get("driver_version"), "cuda_driver_version": driver.get("cuda_driver_version"),
        "versions": environment.versions(), "gpudiag_version": environment.versions()["gpudiag"],
        "options": options, "ranks": [], "artifacts": {}, "missing": [], "unavailable": {}, "notes": [],
    }
    if nvml_reason:
        manifest["unavailable"]["gpus"] = nvml_reason
    return manifest


def finish_manifest(manifest: dict, folder: str | os.PathLike, exit_code: int | None, end_ns: int,
                    parent_expected: list[str], notes: list[str] | None = None) -> dict:
    """Fill in how the run ended and reconcile the artifacts with what was expected."""
    records = run_folder.read_child_records(folder)
    present = run_folder.artifacts(folder)
    expected = run_folder.expected_artifacts(records, parent_expected)
    status, signal_name = status_of(exit_code)
    manifest.update({
        "status": status, "exit_code": exit_code, "signal": signal_name,
        "end": iso(end_ns), "end_ns": end_ns, "duration_s": round((end_ns - manifest["start_ns"]) / 1e9, 3),
        "ranks": run_folder.ranks(records, present),
        "artifacts": present,
        "missing": [p for p in expected if p not in present],
    })
    for record in records:
        if record.get("event") == "start" and record.get("versions"):
            for key, value in record["versions"].items():
                if value is not None:
                    manifest["versions"][key] = value
        if record.get("event") == "start" and record.get("framework"):
            manifest.setdefault("frameworks", {})[str(record.get("rank"))] = record["framework"]
    ended = {r.get("rank") for r in records if r.get("event") == "end"}
    started = {r.get("rank") for r in records if r.get("event") == "start"}
    for rank in sorted(started - ended, key=lambda r: (r is None, r)):
        manifest["notes"].append(f"rank {rank} did not reach its end of run (killed before it could flush)")
    manifest["notes"].extend(notes or [])
    return manifest


def write_manifest(folder: str | os.PathLike, manifest: dict) -> Path:
    path = Path(folder) / run_folder.MANIFEST
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    return path
