"""The run budget (issue 30): every second of the run in one part, the parts adding up to the wall time, and the
verdict weighing the whole run. Real run folders (fixtures/runs/, PROVENANCE.md); the span arithmetic is also
checked on spans written out here, named as such."""

from __future__ import annotations

import json

import numpy as np
import pytest

import diagnose
from diagnose.analysis import analyze, run_analyzer
from diagnose.analyzers import run_budget
from diagnose.derive.derived import Derived
from diagnose.derive.run_budget_table import covered, merge, subtract
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"
LIGHT_RUNS = sorted(
    p.name
    for p in RUNS.iterdir()
    if (p / "manifest.json").exists() and json.loads((p / "manifest.json").read_text())["mode"] == "light"
)


@pytest.mark.parametrize("name", LIGHT_RUNS)
def test_the_parts_add_up_to_the_wall_time_of_every_light_run(name):
    """Done-when (d): the parts add to the wall time within 2 % on every run fixture; the wall time is the one the
    parent clocked (the child's spawn to its exit, or for an older folder gpudiag's own start to end)."""
    profile = diagnose.load(RUNS / name)
    budgets = Derived(profile).run_budget()
    assert budgets, name
    m = profile.manifest
    start, end = m.get("child_start_ns", m["start_ns"]), m.get("child_end_ns", m["end_ns"])
    for rank, b in budgets.items():
        assert b.parts["ms"].sum() == pytest.approx(b.wall_ms, rel=1e-9)
        assert (b.parts["ms"] >= 0).all()
        first = float(profile.step_events[rank]["t_start_ns"].min())
        if start <= first <= end:  # a rank of torchrun: its steps lie inside the parent's clock
            assert b.wall_ms == pytest.approx((end - start) / 1e6, rel=0.02), (name, rank)


def test_ncu_runs_and_traces_alone_have_no_run_budget():
    assert Derived(diagnose.load(RUNS / "ncu_mlp")).run_budget() == {}
    result = run_analyzer(run_budget, diagnose.load(RUNS / "ncu_mlp"), Thresholds())
    assert [f.id for f in result.findings] == ["run_budget.not_measured"]
    assert "Nsight Compute" in result.findings[0].recommendation


def test_char_lm_eval_evaluation_and_checkpoint_parts_are_their_records():
    """fixtures/runs/char_lm_eval (a real CPU capture): the evaluation and checkpoint parts are exactly the time
    of light mode's evaluation and torch.save records (they do not overlap anything of higher precedence), and
    the steps' time outside them is steady, warm-up, slow or gpudiag's."""
    profile = diagnose.load(RUNS / "char_lm_eval")
    b = Derived(profile).run_budget()[0]
    work = profile.work_records[0]
    assert b.part_ms("evaluation") == pytest.approx(work.loc[work["what"] == "evaluation", "ms"].sum(), abs=1e-3)
    assert b.part_ms("checkpoint") == pytest.approx(work.loc[work["what"] == "checkpoint", "ms"].sum(), abs=1e-3)
    steps = profile.step_events[0]
    in_steps = sum(b.part_ms(p) for p in ("warmup", "steady", "input", "slow_unexplained", "slow_new_shape"))
    carved = b.part_ms("evaluation") + b.part_ms("checkpoint") + b.part_ms("gpudiag")
    span_ms = (steps["t_start_ns"].max() - steps["t_start_ns"].min()) / 1e6 + steps["host_ms"].iloc[-1]
    assert in_steps + carved == pytest.approx(span_ms, rel=1e-6)
    # a run folder older than the process's own clocks: said, and the wall time is gpudiag's start to end
    assert any("interpreter" in n for n in b.meta["notes"])
    assert b.meta["wall_of"].startswith("gpudiag's start")


def test_the_steady_median_splits_slow_steps_from_steady_ones():
    """Each steady step's time up to the median of their rest is steady; a slow step's excess goes to slow steps."""
    profile = diagnose.load(RUNS / "periodic_checkpoint")
    b = Derived(profile).run_budget()[0]
    median = b.meta["steady_median_ms"]
    assert median > 0
    assert b.meta["slow_steps"] == sorted(b.meta["slow_steps"])
    # the checkpoint's steps are not slow once their torch.save is carved out (their rest is an ordinary step)
    work = profile.work_records[0]
    saved = set(work.loc[work["what"] == "checkpoint", "step"])
    assert not saved & set(b.meta["slow_steps"])


# ---- span arithmetic on spans written out here (synthetic, named as such) --------------------------------------------


def test_synthetic_subtract_and_merge():
    claimed = [(10.0, 20.0), (30.0, 40.0)]
    assert subtract(0, 50, claimed) == [(0, 10.0), (20.0, 30.0), (40.0, 50)]
    assert subtract(12, 18, claimed) == []
    assert subtract(15, 35, claimed) == [(20.0, 30.0)]
    assert merge([(30, 40), (10, 20), (15, 32)]) == [(10, 40)]


def test_synthetic_covered_counts_each_span_once():
    pieces = np.array([[10.0, 20.0], [30.0, 40.0]])
    a = np.array([0.0, 15.0, 20.0, 35.0, 45.0, 0.0])
    b = np.array([5.0, 35.0, 30.0, 50.0, 60.0, 100.0])
    assert covered(pieces, a, b).tolist() == [0.0, 10.0, 0.0, 5.0, 0.0, 20.0]
    assert covered(np.zeros((0, 2)), a, b).tolist() == [0.0] * 6


def test_the_verdict_states_the_run_as_its_basis_when_a_run_finding_leads():
    """A run-budget finding's cost is a share of the run's wall time, and the sentence says so with the time."""
    profile = diagnose.load(RUNS / "char_lm_eval")
    th = Thresholds().with_overrides(
        {
            "run_budget": {"named_work_min_share": 0.02},
            "steps": {"unstable_spread_pct": 1e6, "unstable_critical_spread_pct": 2e6},
        }
    )
    analysis = analyze(profile, th)
    lead = next(f for f in analysis.findings if f.id == "run_budget.evaluation")
    b = Derived(profile, th).run_budget()[0]
    assert lead.cost_share == pytest.approx(b.part_ms("evaluation") / b.wall_ms)
    assert "char_lm_eval.py:56" in lead.title
