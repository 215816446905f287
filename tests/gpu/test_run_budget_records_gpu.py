"""GPU test of issue 30's own-cost records: the allocator snapshot's dump (the history needs CUDA) as a gpudiag work
record, at the window's end and at exit, before the run's end record. Skipped without a GPU.

    PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_run_budget_records_gpu.py -m gpu -s -q
"""

from __future__ import annotations

import sys

import pytest

from tests.gpu.gpu_present import has_cuda_gpu

pytestmark = pytest.mark.gpu

if not has_cuda_gpu():
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)

from tests.gpu.test_launch_gpu import _events, _profile  # noqa: E402
from tests.launch.launch_helpers import SCRIPTS  # noqa: E402

COMMAND = [sys.executable, str(SCRIPTS / "trace_window_loop.py"), "cuda"]


def _own(events: list[dict]) -> list[tuple]:
    return [(e["name"], e["step"]) for e in events if e["kind"] == "work" and e["what"] == "gpudiag"]


def test_the_snapshot_dump_at_the_windows_end_is_recorded_in_the_step_after_it(tmp_path):
    r, _ = _profile(tmp_path / "run", ["--trace-start", "3", "--trace-steps", "2"], COMMAND)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "run" / "memory" / "rank0.snapshot.json.gz").exists()
    events = _events(tmp_path / "run")
    assert _own(events) == [("trace start", 3), ("trace export", 5), ("snapshot dump", 5)]
    steps = {e["step"]: e for e in events if e["kind"] == "step"}
    dump = next(e for e in events if e.get("name") == "snapshot dump")
    assert dump["ms"] > 0 and steps[5]["t_start_ns"] <= dump["t_ns"] <= steps[6]["t_start_ns"]


def test_the_snapshot_dump_at_exit_comes_before_the_end_record(tmp_path):
    r, _ = _profile(tmp_path / "run", ["--trace-steps", "0", "--snapshot-at", "exit"], COMMAND)
    assert r.returncode == 0, r.stderr[-3000:]
    events = _events(tmp_path / "run")
    last_step = max(e["step"] for e in events if e["kind"] == "step")
    assert _own(events) == [("snapshot dump", last_step + 1)]  # the step in progress at exit
    dump = next(i for i, e in enumerate(events) if e.get("name") == "snapshot dump")
    end = next(i for i, e in enumerate(events) if e["kind"] == "run" and e["event"] == "end")
    assert dump < end and events[dump]["t_ns"] <= events[end]["t_ns"]
