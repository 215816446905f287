"""Time slices, the last step source (issue 17): a loop no other source sees still gets steps, labelled "time"."""

from __future__ import annotations

import json
import time

from diagnose.launch.runtime.time_slices import start_after_from_env
from tests.launch.launch_helpers import SCRIPTS, base_env, gpudiag


def _steps(run):
    lines = (run / "events" / "rank0.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("kind") == "step"]


def test_a_loop_without_any_step_source_is_sliced_by_time(tmp_path):
    run = tmp_path / "r"
    env = base_env(GPUDIAG_TIME_SLICES_AFTER_S="0.5")
    started = time.monotonic()
    r = gpudiag("profile", "-o", run, "--", "python3", SCRIPTS / "no_step_loop.py", "5", env=env, timeout=300)
    wall_ms = (time.monotonic() - started) * 1e3
    assert r.returncode == 0, r.stderr[-2000:]
    steps = _steps(run)
    # slices start 0.5 s after torch's import, one a second, over a 5 s loop: 3-4 whole slices recorded (a busy
    # machine delays a slice's start by milliseconds, not the half second that would lose one)
    assert 3 <= len(steps) <= 5, len(steps)
    assert {s["source"] for s in steps} == {"time"}
    host_ms = sorted(s["host_ms"] for s in steps)
    # a second each (the median, so one late boundary cannot move it), and all of them within the run: bounds
    # that a loaded machine cannot break, where a fixed ceiling on a slice's length could be
    assert host_ms[len(host_ms) // 2] > 700 and sum(host_ms) < wall_ms, (host_ms, wall_ms)


def test_time_slices_stay_off_when_told_and_while_another_source_ends_steps(tmp_path):
    run = tmp_path / "r"
    env = base_env(GPUDIAG_TIME_SLICES_AFTER_S="off")
    r = gpudiag("profile", "-o", run, "--", "python3", SCRIPTS / "no_step_loop.py", "2", env=env, timeout=120)
    assert r.returncode == 0 and "no steps seen" in r.stderr, r.stderr[-2000:]
    run2 = tmp_path / "r2"
    env = base_env(GPUDIAG_TIME_SLICES_AFTER_S="0")
    r = gpudiag("profile", "-o", run2, "--", "python3", SCRIPTS / "no_step_loop.py", "2", "marker", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert {s["source"] for s in _steps(run2)} == {"marker"}


def test_start_after_reads_the_environment():
    assert start_after_from_env({}) == 30.0
    assert start_after_from_env({"GPUDIAG_TIME_SLICES_AFTER_S": "2.5"}) == 2.5
    assert start_after_from_env({"GPUDIAG_TIME_SLICES_AFTER_S": "off"}) is None
    assert start_after_from_env({"GPUDIAG_TIME_SLICES_AFTER_S": "-1"}) is None
    assert start_after_from_env({"GPUDIAG_TIME_SLICES_AFTER_S": "soon"}) is None


def test_no_time_slice_begins_inside_an_import(tmp_path):
    """A slice comes at the main thread's next bytecode, wherever it is; inside an import it would read modules
    still being imported (under --ncu, torch.cuda of a torch mid-import switched a JAX run's instrumentation off on
    an H100). Slices skip the import's seconds and go on after it."""
    run = tmp_path / "r"
    env = base_env(GPUDIAG_TIME_SLICES_AFTER_S="0")
    r = gpudiag(
        "profile", "-o", run, "--", "python3", SCRIPTS / "slice_during_import.py", tmp_path, "4", env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    start_ns, end_ns = map(int, (tmp_path / "import_span.txt").read_text().split())
    starts = [s["t_start_ns"] for s in _steps(run)]
    assert not [t for t in starts if start_ns < t < end_ns], (starts, start_ns, end_ns)
    assert [t for t in starts if t <= start_ns] and [t for t in starts if t >= end_ns], starts  # before and after
