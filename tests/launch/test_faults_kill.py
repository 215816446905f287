"""Fault: the training process is SIGKILLed while it writes an artifact (issue 8, faults in `gpudiag profile`).

The kill is placed exactly, from inside the writer: the documented fault-injection hook
GPUDIAG_FAULT_INJECT (diagnose/launch/fault_injection.py, inert unless set) for a JSONL line
and the allocator snapshot, and a script that patches the gzip writer the trace export uses.
Afterwards the folder holds only whole files under their final names, the leftover temporary
files are gone, the manifest says SIGKILL and why each artifact is missing or cut short, and
`gpudiag report` reports what is there with a note on what is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from diagnose.launch import fault_injection, run_dir, run_manifest
from parsers import run_folder
from tests.launch.fault_helpers import assert_valid_run_folder, report_no_html
from tests.launch.launch_helpers import REPO, SCRIPTS, base_env, gpudiag

MARKER_LOOP = SCRIPTS / "marker_loop.py"


def test_the_hook_is_inert_unless_set_and_parses_its_points():
    assert fault_injection.parse("") == {}
    assert fault_injection.parse("jsonl-line@12, snapshot") == {"jsonl-line": 12, "snapshot": 1}
    assert "GPUDIAG_FAULT_INJECT" not in os.environ and not fault_injection.due("jsonl-line")


def test_kill_halfway_through_an_events_line(tmp_path):
    run = tmp_path / "r"
    r = gpudiag(
        "profile",
        "--no-nvml",
        "-o",
        run,
        "--",
        sys.executable,
        MARKER_LOOP,
        "50",
        "0.005",
        env=base_env(GPUDIAG_FAULT_INJECT="jsonl-line@7"),
    )
    assert r.returncode == 137, r.stderr
    m = assert_valid_run_folder(run)
    assert (m["status"], m["exit_code"], m["signal"]) == ("signal", 137, "SIGKILL")
    text = (run / "events" / "rank0.jsonl").read_text()
    held = [line for line in text.split("\n") if '"step":-1' in line]  # imports before the first step (how many varies)
    lines = [line for line in text.split("\n") if '"step":-1' not in line]
    # start, expect, stop-signal, steps 0-2, half of step 3's line
    assert held and len(lines) == 7 and not text.endswith("\n")
    assert lines[-1].startswith('{"kind":"step","rank":0,"step":3') and len(lines[-1]) < len(lines[-2])
    assert m["missing"] == [] and "no end record: rank 0 was killed (SIGKILL)" in m["incomplete"]["events/rank0.jsonl"]
    rep, notes = report_no_html(run, "--json", tmp_path / "f.json")
    assert rep.returncode == 0 and "Traceback" not in rep.stderr and "UserWarning" not in rep.stderr
    assert (
        "the script was killed by SIGKILL (exit code 137); what was not finished by then is missing or cut short"
        in notes
    )
    assert any(f"events/rank0.jsonl: line {7 + len(held)} is cut short" in n for n in notes)
    assert any(n.startswith("events/rank0.jsonl is incomplete: no end record") for n in notes)
    summary = json.loads((tmp_path / "f.json").read_text())["summary"]
    assert summary["step_count"] + summary["step_warmup_excluded"] == 3  # the three whole step lines


def test_kill_in_the_middle_of_the_trace_export(tmp_path):
    run, cwd = tmp_path / "r", tmp_path / "cwd"
    cwd.mkdir()
    r = gpudiag(
        "profile",
        "--no-nvml",
        "--trace-start",
        "2",
        "--trace-steps",
        "2",
        "-o",
        run,
        "--",
        sys.executable,
        SCRIPTS / "train_with_outputs.py",
        "20",
        "--kill-in-trace-export",
        cwd=cwd,
    )
    assert r.returncode == 137, r.stderr
    m = assert_valid_run_folder(run)  # the half-written gzip and the raw JSON under .tmp names were removed
    assert not (run / "trace" / "rank0.json.gz").exists()
    assert (m["status"], m["signal"], m["missing"]) == ("signal", "SIGKILL", ["trace/rank0.json.gz"])
    why = m["missing_reasons"]["trace/rank0.json.gz"]
    assert why.startswith("not written: rank 0 was killed (SIGKILL) before it wrote it (it was being written then")
    steps = [json.loads(line) for line in (run / "events" / "rank0.jsonl").read_text().splitlines()]
    prefix = f"trace/rank0.json.gz.{steps[0]['pid']}."  # the raw JSON export and the gzip being written
    removed = sorted(f["path"].removeprefix(prefix) for f in m["faults"] if f["kind"] == "leftover")
    assert removed == ["json.tmp", "tmp"]
    assert any(n.startswith("removed 2 temporary file(s)") for n in m["notes"])
    # the step records held so far (0-3, the window's last step included) are written before the export starts
    assert [s["step"] for s in steps if s["kind"] == "step"] == [0, 1, 2, 3]
    rep, notes = report_no_html(run)
    assert rep.returncode == 0, rep.stderr
    assert f"trace/rank0.json.gz is missing: {why}" in notes


def test_kill_before_the_first_step_leaves_nothing_to_report(tmp_path):
    run = tmp_path / "r"
    r = gpudiag(
        "profile",
        "--no-nvml",
        "-o",
        run,
        "--",
        sys.executable,
        MARKER_LOOP,
        "5",
        "0.005",
        env=base_env(GPUDIAG_FAULT_INJECT="jsonl-line@1"),
    )
    assert r.returncode == 137
    assert_valid_run_folder(run)
    rep, _ = report_no_html(run)
    assert rep.returncode == 2 and "Traceback" not in rep.stderr
    assert rep.stderr.startswith(f"gpudiag: error: {run}: nothing to report")
    assert "the script was killed by SIGKILL" in rep.stderr


_SNAPSHOT_WRITER = textwrap.dedent("""
    import importlib, importlib.util, sys, types
    # as the sitecustomize does: the runtime package from its file, without the diagnose package
    folder = f"{sys.argv[1]}/runtime"
    spec = importlib.util.spec_from_file_location("diagnose.launch.runtime", f"{folder}/__init__.py",
                                                  submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    memory_capture = importlib.import_module("diagnose.launch.runtime.memory_capture")
    snapshot = {"segments": [{"address": i, "total_size": 2 << 20, "blocks": []} for i in range(5000)]}
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=types.SimpleNamespace(_snapshot=lambda: snapshot)))
    memory_capture.write_snapshot(torch, sys.argv[2])
""")


def test_kill_halfway_through_the_allocator_snapshot(tmp_path):
    """CPU torch never records allocator history, so the snapshot writer runs here on a hand-made snapshot."""
    run = tmp_path / "r"
    target = run / "memory" / "rank0.snapshot.json.gz"
    p = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT_WRITER, REPO / "diagnose" / "launch", target],
        env=base_env(GPUDIAG_FAULT_INJECT="snapshot"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == -9, p.stderr
    assert not target.exists()
    (leftover,) = (run / "memory").iterdir()
    assert leftover.name.startswith("rank0.snapshot.json.gz.") and leftover.name.endswith(".tmp")
    assert 0 < leftover.stat().st_size
    assert run_folder.artifacts(run) == {}  # a .tmp is never an artifact
    # what the parent does once the child is gone: remove the leftover, explain the missing snapshot
    (run / "events").mkdir()
    (run / "events" / "rank0.jsonl").write_text(
        '{"kind":"run","event":"start","rank":0,"world_size":null}\n'
        '{"kind":"run","event":"expect","rank":0,"artifact":"memory/rank0.snapshot.json.gz"}\n'
    )
    removed = run_dir.remove_leftovers(run)
    assert removed == [f"memory/{leftover.name}"] and not leftover.exists()
    m = run_manifest.finish_manifest(
        {"start_ns": 0, "notes": [], "versions": {}},
        run,
        137,
        10**9,
        [],
        faults=[{"kind": "leftover", "path": p} for p in removed],
    )
    assert m["missing"] == ["memory/rank0.snapshot.json.gz"]
    assert m["missing_reasons"]["memory/rank0.snapshot.json.gz"] == (
        f"not written: rank 0 was killed (SIGKILL) before it wrote it (it was being written then: the partial file "
        f"memory/{leftover.name} was removed)"
    )
