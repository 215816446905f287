"""A script that profiles itself with torch.profiler runs under light mode as it runs alone (diagnose/launch/runtime/
user_profilers.py): one Kineto session a process, so gpudiag's trace window gives way to the script's profiler.
Before, examples/gan_loader.py (a scheduled profiler that traces from its step 12) died under `gpudiag profile` with
"Profiler is already enabled on this thread" at its prof.step(), after gpudiag's window opened at step 10."""

from __future__ import annotations

import json
import sys

import pytest

from tests.launch.launch_helpers import SCRIPTS, gpudiag, records

pytest.importorskip("torch")

SCRIPT = SCRIPTS / "own_profiler.py"


def profile(tmp_path, mode: str):
    run, out = tmp_path / "r", tmp_path / "own.trace.json"
    r = gpudiag(
        "profile", "--trace-start", "4", "--trace-steps", "6", "-o", run, "--", sys.executable, SCRIPT, "20", mode, out
    )
    return r, run, out


def test_a_scheduled_profiler_of_the_script_keeps_the_trace_and_the_window_stays_shut(tmp_path):
    r, run, out = profile(tmp_path, "scheduled")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "done" in r.stdout
    assert "no profiler trace: the script runs its own torch.profiler" in r.stderr
    names = {e.get("name", "") for e in json.loads(out.read_text())["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)  # the script's own trace, with its steps
    assert not (run / "trace").exists()
    events = records(run)
    assert not any(e.get("event") == "expect" and "trace" in e.get("artifact", "") for e in events)
    assert sum(e["kind"] == "step" for e in events) >= 19  # the steps are all recorded


def test_a_profiler_the_script_starts_inside_the_window_closes_the_window_first(tmp_path):
    r, run, out = profile(tmp_path, "late")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "done" in r.stdout
    assert "the trace window closed early: the script started its own torch.profiler" in r.stderr
    assert (run / "trace" / "rank0.json.gz").is_file()  # gpudiag's window, closed and written before the script's
    assert out.is_file() and json.loads(out.read_text())["traceEvents"]
    events = records(run)
    assert any(e.get("name") == "trace export" for e in events if e["kind"] == "work")
