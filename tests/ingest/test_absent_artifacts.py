"""Artifacts the manifest lists that are not in the run folder are said (issue 28 item 8): on the terminal, in the
findings JSON's ``warnings`` and in the HTML, with what was read instead (ncu's raw CSV for a removed .ncu-rep)
or what the report lacks without them. Before, ``"warnings": []``."""

from __future__ import annotations

import json
import shutil

import pytest

from diagnose.ingest.loading import load
from tests.cli_run import gpudiag
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"

NCU_REP_NOTE = (
    "ncu/report.ncu-rep is listed in the manifest (70.3 MB) but is not in the folder (removed, or not copied with it); "
    "read ncu/raw.csv, ncu's raw CSV export of the same capture, instead"
)
SNAPSHOT_NOTE = (
    "memory/rank0.snapshot.json.gz is listed in the manifest (16.8 kB) but is not in the folder (removed, or not "
    "copied with it); no allocator history for rank 0: which lines allocate the memory is not in this report"
)
TRACE_NOTE = (
    "trace/rank0.json.gz is listed in the manifest (102.1 kB) but is not in the folder (removed, or not copied with "
    "it); no profiler trace for rank 0: its kernels, GPU idle time, host syncs and launches are not in this report"
)


def test_removed_ncu_report_says_the_raw_csv_was_read_instead():
    """fixtures/runs/ncu_mlp: the 67 MB report was removed for size (PROVENANCE.md); the manifest still lists it."""
    profile = load(RUNS / "ncu_mlp", workers=1, quiet=True)
    assert profile.warnings == [NCU_REP_NOTE]
    assert len(profile.kernels) == 45  # the launches of ncu/raw.csv


@pytest.fixture()
def run_without_trace_and_snapshot(tmp_path):
    """A real H200 run folder (sync_heavy) whose trace and allocator snapshot were deleted after the run."""
    run = tmp_path / "sync_heavy"
    shutil.copytree(RUNS / "sync_heavy", run)
    (run / "trace" / "rank0.json.gz").unlink()
    (run / "memory" / "rank0.snapshot.json.gz").unlink()
    return run


def test_deleted_trace_and_snapshot_are_said_everywhere(run_without_trace_and_snapshot, tmp_path):
    run = run_without_trace_and_snapshot
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    r = gpudiag("report", run, "-o", out_html, "--json", out_json)
    assert r.returncode == 0, r.stderr
    assert json.loads(out_json.read_text())["warnings"] == [SNAPSHOT_NOTE, TRACE_NOTE]
    notes = [line for line in r.stdout.splitlines() if line.startswith("  note: ")]
    assert notes == [f"  note: {SNAPSHOT_NOTE}", f"  note: {TRACE_NOTE}"]
    page = out_html.read_text()
    section = page[page.index('id="warnings"') :]
    assert "trace/rank0.json.gz is listed in the manifest (102.1 kB) but is not in the folder" in section
    assert "memory/rank0.snapshot.json.gz is listed in the manifest (16.8 kB) but is not in the folder" in section
    # what is still there is read: the per-step timings and allocator stats
    profile = load(run, workers=1, quiet=True)
    assert not profile.traces and not profile.snapshots
    assert len(profile.step_events[0]) == 59 and len(profile.memory_stats[0]) > 0


def test_a_complete_run_folder_has_no_such_note():
    assert load(RUNS / "sync_heavy", workers=1, quiet=True).warnings == []
