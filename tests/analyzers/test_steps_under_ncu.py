"""Issue 32 (b): no time-based step finding from steps that ran under Nsight Compute. The H200 run folders that
`gpudiag profile --ncu` wrote (fixtures/runs/ncu_churn: a 40.3 s profiled step among 11 ms steps had read as
"Step time varies widely ... p90 28.2 s", critical; ncu_mlp: "1 step took over 1.5x the median") get one info
finding per step analyzer that says why, with the step times ncu made, and nothing else of theirs."""

from __future__ import annotations

import json

import pytest

import diagnose
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
NCU_RUNS = sorted(p.name for p in RUNS.iterdir() if (p / "manifest.json").exists() and json.loads(
    (p / "manifest.json").read_text()).get("mode") == "ncu")  # fmt: skip
STEP_ANALYZERS = ("steps", "step_budget", "run_budget")


def test_the_fixtures_hold_ncu_runs_with_step_records():
    assert {"ncu_churn", "ncu_mlp"} <= set(NCU_RUNS)
    for run in ("ncu_churn", "ncu_mlp"):
        assert len(diagnose.load(RUNS / run).step_events[0]) >= 7


@pytest.mark.parametrize("run", NCU_RUNS)
def test_no_step_time_finding_under_ncu(run):
    a = diagnose.analyze(diagnose.load(RUNS / run))
    judged = [f.id for f in a.findings if f.analyzer in STEP_ANALYZERS and not f.id.endswith(".not_measured")]
    assert judged == []
    assert not [k for k in a.summary if k.startswith(("step_", "steps_", "run_"))]


def test_the_reason_says_ncu_and_the_step_times_it_made():
    a = diagnose.analyze(diagnose.load(RUNS / "ncu_churn"))
    by_id = {f.id: f for f in a.findings}
    for fid in ("steps.not_measured", "step_budget.not_measured", "run_budget.not_measured"):
        assert by_id[fid].recommendation.startswith("The run ran under Nsight Compute (--ncu)"), fid
    assert (
        "(its 7 steps took 11.2 ms at the median and up to 40.3 s under ncu)"
        in by_id["steps.not_measured"].recommendation
    )
    assert "light mode (without --ncu)" in by_id["steps.not_measured"].recommendation
    assert not [i for i in a.verdict.top_finding_ids if i.split(".")[0] in STEP_ANALYZERS]
    assert "Step time varies" not in a.verdict.sentence
