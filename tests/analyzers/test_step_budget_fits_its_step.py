"""A step budget adds up to its step, and a cause's title carries its basis in its evidence (issue 28).

fixtures/runs/mem_churn trains on a batch of another length every step (examples/mem_churn.py: 10 lengths in
turn). Its two traced steps, 10 and 11, measured 31.94 ms of compute, longer than the 27.6 ms median steady step:
the median bar had drawn 115.9 % of the step, its compute part longer than the step. The traced steps tell the
step's mix, not its size, so their parts are scaled down to fill it, and the table and the notes say so.

The causes' titles name where they were measured ("measured in traced steps 10–12", "measured in 92 steady
steps"): those numbers are in the finding's evidence.
"""

from __future__ import annotations

import pytest

import diagnose
from diagnose.checks.report_invariants import check_analysis
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"


@pytest.fixture(scope="module")
def mem_churn():
    return diagnose.analyze(diagnose.load(RUNS / "mem_churn", quiet=True, workers=1))


def median_budget(analysis):
    b = analysis.results["step_budget"].tables["budget"]
    return b[(b["rank"] == 0) & (b["column"] == "median step")].set_index("part")


def evidence(finding) -> dict:
    return {e.metric: (e.value, e.unit) for e in finding.evidence}


def test_mem_churn_traced_parts_are_scaled_to_the_median_step(mem_churn):
    median = median_budget(mem_churn)
    wall = 27.603935
    assert median["wall_ms"].iloc[0] == pytest.approx(wall, abs=1e-6)
    factor = wall / (31.944030 + 0.011760 + 0.049090)  # compute + copies + launch-bound of traced steps 10-11
    assert median["fit_factor"].iloc[0] == pytest.approx(factor, abs=1e-5) == pytest.approx(0.8625, abs=1e-4)
    assert median.loc["compute", "ms"] == pytest.approx(27.5514, abs=1e-3)  # was 31.944 ms, 115.7 % of the step
    assert median.loc["memcpy", "ms"] == pytest.approx(0.01014, abs=1e-5)
    assert median.loc["launch_bound", "ms"] == pytest.approx(0.04234, abs=1e-5)
    assert median.loc["unexplained", "ms"] == pytest.approx(0.0, abs=1e-9)
    assert median["share"].sum() == pytest.approx(1.0, abs=1e-9)
    assert median["shown_ms"].sum() == pytest.approx(wall, abs=1e-9)
    assert (median["shown_ms"].fillna(0) <= wall).all()
    assert median.loc["compute", "measured_in"] == "traced steps 10–11, scaled down to fit the step"
    assert median.loc["collective", "measured_in"] == "traced steps 10–11"  # 0 ms: nothing scaled
    notes = mem_churn.results["step_budget"].meta["ranks"][0]["notes"]
    (note,) = [n for n in notes if "scaled by" in n]
    assert "their GPU busy alone (31.956 ms) is longer than it" in note and "scaled by 0.862" in note
    # the slow steps (54.8 ms) hold the traced parts as measured, and the traced steps their own
    b = mem_churn.results["step_budget"].tables["budget"]
    assert (b.loc[b["column"] != "median step", "fit_factor"] == 1.0).all()
    assert mem_churn.summary["step_budget_compute_ms"] == pytest.approx(27.5514, abs=1e-3)


def test_mem_churn_budget_holds_the_invariants(mem_churn):
    broken = [v for v in check_analysis(mem_churn) if v.invariant in ("budget_adds_up", "part_le_whole")]
    assert broken == []


def test_sync_heavy_causes_carry_the_traced_steps_they_name():
    a = diagnose.analyze(diagnose.load(RUNS / "sync_heavy", quiet=True, workers=1))
    by_id = {f.id: f for f in a.findings}
    for fid in ("step_budget.sync", "step_budget.launch_bound"):
        f = by_id[fid]
        assert "traced steps 10–12" in f.title
        ev = evidence(f)
        assert ev["step_budget_traced_steps"] == (3.0, "steps")
        assert ev["step_budget_traced_first_step"] == (10.0, "step")
        assert ev["step_budget_traced_last_step"] == (12.0, "step")
        assert "step_budget_input_steps" not in ev and "step_budget_fit_factor" not in ev
    assert not [v for v in check_analysis(a) if v.invariant == "title_numbers_in_evidence"]


def test_epoch_stall_input_carries_the_steady_steps_it_was_measured_in():
    a = diagnose.analyze(diagnose.load(RUNS / "epoch_stall", quiet=True, workers=1))
    (f,) = [f for f in a.findings if f.id == "step_budget.input"]
    assert f.title.endswith("the loop blocks in the DataLoader, measured in 92 steady steps")
    ev = evidence(f)
    assert ev["step_budget_input_steps"] == (92.0, "steps")
    assert "step_budget_traced_steps" not in ev
    assert not [v for v in check_analysis(a) if v.invariant == "title_numbers_in_evidence"]


def test_a_foreign_trace_names_its_own_step_numbers():
    a = diagnose.analyze(diagnose.load(FIXTURES / "trace" / "no_profilerstep" / "sgd_stacks.json.gz", quiet=True))
    (f,) = [f for f in a.findings if f.id == "step_budget.launch_bound"]
    assert f.title.endswith("host-caused as in traced steps 3–7")
    ev = evidence(f)
    assert (ev["step_budget_traced_steps"][0], ev["step_budget_traced_first_step"][0]) == (5.0, 3.0)
    assert ev["step_budget_traced_last_step"][0] == 7.0
