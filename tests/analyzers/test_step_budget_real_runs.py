"""The step-time budget on issue 18's H200 captures (fixtures/runs/input_bound, epoch_stall, sync_heavy)."""

from __future__ import annotations

import pytest

import diagnose
from diagnose.analyzers import step_budget
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
EXAMPLES = FIXTURES.parent / "examples"


@pytest.fixture(scope="module")
def analysed():
    return {name: diagnose.analyze(diagnose.load(RUNS / name)) for name in ("input_bound", "epoch_stall", "sync_heavy")}


def median_budget(analysis):
    b = analysis.results["step_budget"].tables["budget"]
    return b[b["column"] == "median step"].set_index("part")


def _line_of(script: str, marker: str) -> int:
    text = (EXAMPLES / script).read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if line.rstrip().endswith(marker))


def test_input_bound_top_finding_is_the_input_wait(analysed):
    a = analysed["input_bound"]
    top = a.findings[0]
    assert top.id == "step_budget.input" and top.cost_share == pytest.approx(0.896, abs=0.001)
    assert top.title.startswith("The GPU waits for input 36.2 ms of the 40.4 ms median step (89.6 %)")
    assert a.verdict.sentence.startswith("The GPU waits for input 36.2 ms")
    # the symptoms the cause explains come after it
    ids = [f.id for f in a.findings]
    assert ids.index("utilization.low_gpu_util") > 0 and ids.index("idle.gpu_idle") > 0


def test_epoch_boundary_stalls_are_reported_with_their_period(analysed):
    a = analysed["epoch_stall"]
    top = a.findings[0]
    assert top.id == "step_budget.periodic" and top.cost_share == pytest.approx(0.768, abs=0.001)
    assert top.title.startswith("Every 20 steps (step 19 + 20i: steps 19, 39, 59, 79)")
    assert "waiting 450 ms for input" in top.title and "persistent_workers=True" in top.recommendation
    period = a.results["step_budget"].meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["steps"]) == (20, 19, [19, 39, 59, 79])
    assert period["input_wait"] is True


def test_sync_heavy_names_the_costliest_sync_line(analysed):
    a = analysed["sync_heavy"]
    line = _line_of("sync_heavy.py", "# SYNC-3")
    (sync,) = [f for f in a.findings if f.id == "step_budget.sync"]
    assert sync.cost_share == pytest.approx(0.253, abs=0.001) and f"sync_heavy.py:{line}" in sync.title
    (launch,) = [f for f in a.findings if f.id == "step_budget.launch_bound"]
    assert launch.cost_share == pytest.approx(0.557, abs=0.001)  # a small model: launch-bound first


@pytest.mark.parametrize(
    "name, measured_share",
    [("input_bound", 0.908), ("epoch_stall", 0.411), ("sync_heavy", 0.443)],
)
def test_parts_add_up_to_the_step(analysed, name, measured_share):
    """The parts add up to the median step exactly; what is measured directly (not the inferred host work) is the
    share given, and nothing is left unexplained: the rest is GPU idle the traced steps show as host-caused."""
    m = median_budget(analysed[name])
    wall = m["wall_ms"].iloc[0]
    assert m["ms"].sum() == pytest.approx(wall, rel=1e-9)
    assert abs(m.loc["unexplained", "ms"]) < 0.05 * wall
    direct = m["ms"].drop(["launch_bound", "unexplained"]).sum()
    assert direct / wall == pytest.approx(measured_share, abs=0.002)
    assert m.loc["launch_bound", "measured_in"].startswith("inferred:")


def test_without_a_trace_the_rest_stays_unexplained():
    """No traced steps, no inference: input_bound's steps without its trace leave the remainder unexplained."""
    profile = diagnose.load(RUNS / "input_bound")
    profile.traces.clear()
    result = step_budget.analyze(profile, Thresholds())
    b = result.tables["budget"]
    m = b[b["column"] == "median step"].set_index("part")
    assert m.loc["input", "share"] == pytest.approx(0.896, abs=0.001)
    assert m.loc["unexplained", "share"] == pytest.approx(0.104, abs=0.001)
