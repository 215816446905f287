"""manifest.json: what ran, on what, how it ended, and which artifacts exist or are missing.

Written twice, whole each time (temporary name + rename): at the start with
``"status": "running"`` and no exit code, and at the end. A run whose manifest still says
"running" was killed with its parent. Fields: docs/run-folder.md (schema gpudiag.run/1).

At the end every missing artifact gets a reason (``missing_reasons``) and every artifact
that exists but was cut short gets one too (``incomplete``), from the faults the processes
reported (a full disk, NVML gone, ncu killed; ``faults``) and from how each rank ended.
:func:`parsers.run_folder.report_notes` turns them into the lines ``gpudiag report`` shows.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from diagnose.launch import host_environment
from diagnose.outputs.atomic_write import atomic_write_text
from parsers import run_folder
from parsers.run_records import (
    MANIFEST,
    MANIFEST_SCHEMA,
    NCU_RAW_CSV,
    NCU_REPORT,
    RUN_END,
    RUN_START,
    is_appended,
    rank_in_path,
)

SCHEMA = MANIFEST_SCHEMA


def iso(t_ns: int) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_ns / 1e9))
        + f".{t_ns // 1_000_000 % 1000:03d}"
        + time.strftime("%z", time.localtime(t_ns / 1e9))
    )


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
    gpus, driver, nvml_reason = host_environment.gpu_info()
    manifest = {
        "schema": SCHEMA,
        "mode": mode,
        "command": list(command),
        "cwd": os.getcwd(),
        "status": "running",
        "exit_code": None,
        "signal": None,
        "start": iso(start_ns),
        "start_ns": start_ns,
        "end": None,
        "end_ns": None,
        "duration_s": None,
        "host": host_environment.host_info(),
        "gpus": gpus,
        "driver_version": driver.get("driver_version"),
        "cuda_driver_version": driver.get("cuda_driver_version"),
        "versions": host_environment.versions(),
        "gpudiag_version": host_environment.versions()["gpudiag"],
        "options": options,
        "ranks": [],
        "artifacts": {},
        "missing": [],
        "unavailable": {},
        "notes": [],
        "faults": [],
        "missing_reasons": {},
        "incomplete": {},
    }
    if nvml_reason:
        manifest["unavailable"]["gpus"] = nvml_reason
    return manifest


def finish_manifest(
    manifest: dict,
    folder: str | os.PathLike,
    exit_code: int | None,
    end_ns: int,
    parent_expected: list[str],
    notes: list[str] | None = None,
    faults: list[dict] | None = None,
) -> dict:
    """Fill in how the run ended, reconcile the artifacts with what was expected, and say why any is
    missing or incomplete (``faults``: what the processes and the parent reported going wrong)."""
    records = run_folder.read_child_records(folder)
    present = run_folder.artifacts(folder)
    expected = run_folder.expected_artifacts(records, parent_expected)
    status, signal_name = status_of(exit_code)
    manifest.update(
        {
            "status": status,
            "exit_code": exit_code,
            "signal": signal_name,
            "end": iso(end_ns),
            "end_ns": end_ns,
            "duration_s": round((end_ns - manifest["start_ns"]) / 1e9, 3),
            "ranks": run_folder.ranks(records, present),
            "artifacts": present,
            "missing": [p for p in expected if p not in present],
        }
    )
    for record in records:
        if record.get("event") == RUN_START.event and record.get("versions"):
            for key, value in record["versions"].items():
                if value is not None:
                    manifest["versions"][key] = value
        if record.get("event") == RUN_START.event and record.get("framework"):
            manifest.setdefault("frameworks", {})[str(record.get("rank"))] = record["framework"]
    manifest["faults"] = list(manifest.get("faults") or []) + list(faults or [])
    ended = {r.get("rank") for r in records if r.get("event") == RUN_END.event}
    started = {r.get("rank") for r in records if r.get("event") == RUN_START.event}
    disk_full = {f.get("rank"): f for f in manifest["faults"] if f.get("kind") == "disk-full" and "rank" in f}
    for rank in sorted(started - ended, key=lambda r: (r is None, r)):
        if rank in disk_full:
            manifest["notes"].append(
                f"rank {rank} stopped writing at step {disk_full[rank].get('step')}: {disk_full[rank].get('error')}"
            )
        else:
            manifest["notes"].append(f"rank {rank} did not reach its end of run (killed before it could flush)")
    manifest["notes"].extend(notes or [])
    manifest["missing_reasons"], manifest["incomplete"] = explain(manifest, records)
    return manifest


def _of_rank(path: str, rank) -> bool:
    return rank is not None and rank_in_path(path) == rank


def _seconds(manifest: dict, t_ns) -> float | None:
    """Seconds from the run's start to ``t_ns`` (unix ns), or None."""
    if not isinstance(t_ns, (int, float)) or not isinstance(manifest.get("start_ns"), int):
        return None
    return max(0.0, (t_ns - manifest["start_ns"]) / 1e9)


def explain(manifest: dict, records: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """(missing artifact → why, present but cut-short artifact → why)."""
    missing, present = list(manifest.get("missing") or []), dict(manifest.get("artifacts") or {})
    why_missing: dict[str, str] = {}
    incomplete: dict[str, str] = {}
    for fault in manifest.get("faults") or []:
        _explain_fault(manifest, fault, missing, present, why_missing, incomplete)
    status, signal_name = manifest.get("status"), manifest.get("signal")
    started = {r.get("rank") for r in records if r.get("event") == RUN_START.event}
    ended = {r.get("rank") for r in records if r.get("event") == RUN_END.event}
    for rank in sorted(started - ended, key=lambda r: (r is None, r)):
        if manifest.get("stopped_after_window"):  # the end asked for: --after-window stop, once ncu's window was done
            cause = f"gpudiag stopped rank {rank} once its ncu window was profiled (--after-window stop)"
        elif status == "signal":
            cause = f"rank {rank} was killed ({signal_name})"
        else:
            cause = f"rank {rank} ended without flushing (os._exit, a crash in native code, or a kill of that process)"
        for path in missing:
            if _of_rank(path, rank):
                why_missing.setdefault(path, f"not written: {cause} before it wrote it")
        for path in present:
            if _of_rank(path, rank) and is_appended(path):
                incomplete.setdefault(
                    path,
                    f"no end record: {cause}; every whole line is kept (a cut last line is dropped by the readers)",
                )
    for path in missing:
        if path in why_missing:
            continue
        rank = rank_in_path(path)
        if rank is not None and rank not in started:
            if status == "signal":
                why_missing[path] = f"the job was killed ({signal_name}) before rank {rank} reached its first step"
            else:
                why_missing[path] = (
                    f"rank {rank} never reached a step boundary (no optimizer.step(), no backward() and no "
                    "diagnose.step() seen in that process)"
                )
        else:
            why_missing[path] = "not written; the run's stderr has the gpudiag: line that says why"
    for fault in manifest.get("faults") or []:  # a temporary file left behind: the write was under way
        leftover = str(fault.get("path", "")) if fault.get("kind") == "leftover" else ""
        for path in why_missing:
            head, _, name = path.rpartition("/")
            if leftover.startswith(f"{path}.") or leftover.startswith(f"{head}/.{name}." if head else f".{name}."):
                why_missing[path] += f" (it was being written then: the partial file {leftover} was removed)"
    return dict(sorted(why_missing.items())), dict(sorted(incomplete.items()))


def _explain_fault(manifest, fault: dict, missing, present, why_missing: dict, incomplete: dict) -> None:
    kind, artifact, error = fault.get("kind"), fault.get("artifact"), fault.get("error") or "unknown error"
    rank = fault.get("rank")
    if kind == "disk-full" and rank is not None:  # a child: it wrote nothing more after this
        step = f" at step {fault['step']}" if fault.get("step") is not None else ""
        for path in missing:
            if _of_rank(path, rank):
                why_missing.setdefault(
                    path,
                    f"{error} while writing it{step}"
                    if path == artifact
                    else f"not written: gpudiag stopped writing for rank {rank} after {error} on {artifact}{step}",
                )
        for path in present:
            if _of_rank(path, rank) and is_appended(path):
                where = "" if path == artifact else f" on {artifact}"
                incomplete.setdefault(
                    path, f"cut short{step}: {error}{where}; every line before is whole, nothing after was written"
                )
    elif kind == "write-failed" and artifact in missing:
        why_missing.setdefault(artifact, error)
    elif kind in ("nvml-stopped", "disk-full") and artifact:  # the parent's NVML sampler
        at, last = _seconds(manifest, fault.get("t_ns")), _seconds(manifest, fault.get("last_sample_ns"))
        when = f" {at:.1f} s into the run" if at is not None else ""
        cause = f"NVML stopped answering{when} ({error})" if kind == "nvml-stopped" else f"{error}{when}"
        if artifact in present:
            upto = f" (up to {last:.1f} s)" if last is not None else ""
            incomplete.setdefault(
                artifact,
                f"{cause}; it holds the {fault.get('rows', 0)} whole rows sampled "
                f"before{upto}, the run went on without NVML",
            )
        elif artifact in missing:
            why_missing.setdefault(artifact, cause)
    elif kind == "ncu-killed":
        partial = fault.get("partial_report")
        by = f"ncu was killed ({fault.get('signal')}) after profiling {fault.get('launches', 0)} kernel launches"
        for path, text in (
            (
                NCU_REPORT,
                by
                + (
                    f"; what it had written is kept as {partial}, not read as a report"
                    if partial
                    else "; it left no report"
                ),
            ),
            (NCU_RAW_CSV, f"not exported: {by}"),
        ):
            if path in missing:
                why_missing.setdefault(path, text)


def write_manifest(folder: str | os.PathLike, manifest: dict) -> Path:
    path = Path(folder) / MANIFEST
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    return path
