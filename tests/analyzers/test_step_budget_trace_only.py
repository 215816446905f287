"""The step-time budget of a trace captured elsewhere (no gpudiag run folder): its own steps, its own DataLoader
ranges, and nothing charged to gpudiag's trace window."""

from __future__ import annotations

import time

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES


def median_budget(result):
    b = result.tables["budget"]
    return b[b["column"] == "median step"].set_index("part")


def test_a_kineto_trace_without_a_run_folder_gets_a_budget():
    """fixtures/trace/sync_planted (H200, ProfilerStep ranges, no step records): the planted syncs, nothing
    blamed on gpudiag's window (the trace is not gpudiag's)."""
    result = run_analyzer(
        step_budget, diagnose.load(FIXTURES / "trace" / "sync_planted" / "trace.json.gz"), Thresholds()
    )
    m = median_budget(result)
    assert m.loc["trace_window", "ms"] == 0
    # of the longer of each step's host and GPU window (0.069 of the host window alone)
    assert m.loc["sync", "share"] == pytest.approx(0.068, abs=0.001)
    assert abs(m.loc["unexplained", "share"]) < 0.01
    assert m.loc["input", "ms"] == 0  # the trace has no DataLoader range: the loop fetched nothing from one
    assert [f.id for f in result.findings] == ["step_budget.sync"]


def test_a_gpu_bound_trace_step_lasts_its_gpu_window():
    """fixtures/trace/sync_free (H200): the host only queues each step's 5.0 ms of kernels in a 2.8 ms host window;
    the step's wall time is its GPU window, so GPU busy (a part) stays within the step (its whole)."""
    result = run_analyzer(step_budget, diagnose.load(FIXTURES / "trace" / "sync_free" / "trace.json.gz"), Thresholds())
    m = median_budget(result)
    wall = m["wall_ms"].iloc[0]
    assert wall == pytest.approx(5.077, abs=0.001)  # the host windows' median is 2.79 ms
    assert m.loc["compute", "ms"] <= wall and m.loc["compute", "share"] == pytest.approx(0.989, abs=0.001)
    assert abs(m.loc["unexplained", "share"]) < 0.01


def test_dataloader_ranges_of_a_real_cpu_trace_are_the_input_wait(tmp_path):
    """A real torch.profiler trace of a loop whose DataLoader takes ~80 ms a batch (4 samples of 20 ms sleep): the
    sleeps dwarf the step's compute even when a busy machine stretches the compute several times over."""
    torch = pytest.importorskip("torch")

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.randn(8), torch.randn(1)

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=4, num_workers=0)
    path = tmp_path / "loader.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i, (x, y) in enumerate(loader):
            loss = (model(x) - y).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 7:
                break
    prof.export_chrome_trace(str(path))
    result = run_analyzer(step_budget, diagnose.load(path), Thresholds())
    m = median_budget(result)
    assert m.loc["input", "measured_in"].endswith("steady steps")
    assert m.loc["input", "ms"] >= 80.0  # four 20 ms sleeps at least
    assert m.loc["input", "share"] > 0.8
    (top,) = [f for f in result.findings if f.id == "step_budget.input"]
    assert top.severity.name == "CRITICAL"
