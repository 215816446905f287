"""Periodic slow steps (issue 28, item 5): every period that fits three times is searched, a trace's own warm-up is
left out, and the title never says "every N steps" of a step that was not slow."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.derive.periodic_work import find_period, longest_period
from diagnose.formatting import ms_human
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES, shared

RUNS = FIXTURES / "runs"


def periodic_of(result):
    return [f for f in result.findings if f.id == "step_budget.periodic"]


def test_the_longest_period_searched_is_the_one_that_fits_three_times():
    assert longest_period(600, 3) == 299  # 0, 299, 598
    assert longest_period(593, 3) == 296
    assert longest_period(57, 3) == 28  # steps 3-59: 20 fits (19, 39, 59)


def evaluation_run_cut_at(last_step: int) -> diagnose.Profile:
    """fixtures/runs/periodic_evaluation (a real CPU capture: an evaluation after steps 19, 39, 59, 79) cut after
    ``last_step``: its real step times and work records, as a shorter run would have written them."""
    profile = diagnose.load(RUNS / "periodic_evaluation")
    steps = profile.step_events[0]
    cut = steps[steps["step"] <= last_step].reset_index(drop=True)
    cut.attrs.update(steps.attrs)
    profile.step_events[0] = cut
    work = profile.work_records[0]
    profile.work_records[0] = work[work["step"] <= last_step].reset_index(drop=True)
    return profile


def test_a_period_that_fits_exactly_three_times_is_found():
    """Steps 0-59: 53 steady steps (warm-up 0-2 and gpudiag's window 10-13 left out). The search stopped at
    53 // 3 = 17 steps, so the evaluation every 20 steps (19, 39, 59) went unreported."""
    result = run_analyzer(step_budget, evaluation_run_cut_at(59), Thresholds())
    meta = result.meta["ranks"][0]
    assert meta["steady_steps"] == 53
    period = meta["period"]
    assert (period["period"], period["offset"], period["steps"]) == (20, 19, [19, 39, 59])
    assert period["not_slow"] == [] and period["slots"] == 3
    assert period["excess_ms"] == pytest.approx(19.46, abs=0.01)
    (f,) = periodic_of(result)
    assert f.title.startswith(
        f"Every 20 steps (step 19 + 20i: steps 19, 39, 59) a step is {ms_human(period['excess_ms'])} slower than the"
    )
    assert f.title.endswith(
        f"evaluation (model.eval() at periodic_work.py:59) takes {ms_human(period['work'][0]['ms'])}"
    )
    assert period["work"][0]["ms"] == pytest.approx(17.9, abs=0.05)
    assert [s.name for s in f.subjects if s.kind == "step"] == ["19", "39", "59"]


def test_a_module_level_loop_that_evaluates_every_200_iterations_is_named():
    """fixtures/runs/char_lm_eval (a real CPU capture, 600 iterations): the evaluations at iterations 200, 400 and the
    last one are timed in steps 199, 399 and 598, which no period holds; light mode's evaluation records name them.
    Nothing did before (issue 28: "an evaluation every 200 steps in a 600-step run went unreported")."""
    result = run_analyzer(step_budget, diagnose.load(RUNS / "char_lm_eval"), Thresholds())
    meta = result.meta["ranks"][0]
    assert meta["steady_steps"] == 592 and meta["median_step_ms"] == pytest.approx(1.653, abs=0.001)
    period = meta["period"]
    assert period["by_work"] and (period["period"], period["steps"]) == (200, [199, 399, 598])
    assert period["excess_ms"] == pytest.approx(91.15, abs=0.01)
    (work,) = period["work"]  # the 4-9 ms torch.save is under half the steps' excess: not named
    assert work["what"] == "evaluation" and work["ms"] == pytest.approx(84.64, abs=0.01)
    assert work["locations"][0][0].endswith("examples/char_lm_eval.py:56")
    (f,) = periodic_of(result)
    assert f.title == (
        f"Steps 199, 399, 598 (3 steps, about every 200 steps) are {ms_human(period['excess_ms'])} slower than the "
        f"median {ms_human(meta['median_step_ms'])}: evaluation (model.eval() at char_lm_eval.py:56) takes "
        f"{ms_human(work['ms'])}"
    )
    assert f.recommendation.startswith("The evaluation that starts at char_lm_eval.py:56 stops training")
    assert [s.name for s in f.subjects if s.kind == "step"] == ["199", "399", "598"]
    assert result.summary["step_budget_period_steps"] == 200


def test_twice_is_not_a_period():
    """Cut after step 39: two evaluations (19, 39) are not a recurrence."""
    result = run_analyzer(step_budget, evaluation_run_cut_at(39), Thresholds())
    assert result.meta["ranks"][0]["period"] is None and not periodic_of(result)


def test_every_step_named_on_the_period_was_slow():
    """The real periodic captures: each step a periodic finding names is a slow steady step of the budget."""
    for run in ("periodic_evaluation", "periodic_checkpoint", "epoch_stall", "loop_epochs"):
        result = run_analyzer(step_budget, diagnose.load(RUNS / run), Thresholds())
        (f,) = periodic_of(result)
        named = {int(s.name) for s in f.subjects if s.kind == "step"}
        slow = set(result.tables["slow_steps"]["step"].astype(int))
        assert named and named <= slow, run
        assert f.title.startswith("Every 20 steps (step 19 + 20i: steps 19, 39, 59, 79)"), run


def fake_quiet_step(steps: pd.DataFrame) -> pd.DataFrame:
    """Named fake: repeat_a's real steps with 20 ms added at steps 13, 23, 43, 53 and not at 33."""
    slow = steps["step"].isin([13, 23, 43, 53])
    steps.loc[slow, ["host_ms", "gpu_ms"]] += 20.0
    return steps


def test_fake_a_period_with_a_quiet_step_names_it_and_never_says_every():
    profile = diagnose.load(RUNS / "repeat_a")
    profile.step_events[0] = fake_quiet_step(profile.step_events[0].copy())
    result = run_analyzer(step_budget, profile, Thresholds())
    period = result.meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["steps"], period["not_slow"]) == (10, 3, [13, 23, 43, 53], [33])
    (f,) = periodic_of(result)
    assert not f.title.startswith("Every")
    assert f.title.startswith(
        "4 of the 5 steps at step 3 + 10i from step 13 (steps 13, 23, 43, 53; not step 33) are 20"
    )


def test_a_traces_first_iterations_are_warm_up():
    """The real convnet trace (fixtures/shared/torch, no run folder): its step 0 took 995 ms of a 3.8 ms median and
    was a slow steady step, with steps 1-2; they are warm-up now, as for step records, and out of every figure."""
    result = run_analyzer(step_budget, diagnose.load(shared("torch", "convnet.trace.json.gz")), Thresholds())
    meta = result.meta["ranks"][0]
    assert meta["warmup_step_numbers"] == [0, 1, 2]
    assert meta["warmup_ms"] == pytest.approx(1100.7, abs=0.1)  # steps 0-2: 995, 68 and 37 ms
    assert meta["steady_steps"] == 9
    assert meta["slow_step_numbers"] == [3, 4]
    assert meta["median_step_ms"] == pytest.approx(3.655, abs=0.001)
    assert result.tables["traced_steps"]["run_step"].tolist() == list(range(3, 12))


def test_a_trace_that_starts_after_warm_up_keeps_every_step():
    """fixtures/trace/sync_planted: ProfilerStep#3-6 (the profiler's schedule skipped the first steps)."""
    result = run_analyzer(
        step_budget, diagnose.load(FIXTURES / "trace" / "sync_planted" / "trace.json.gz"), Thresholds()
    )
    assert result.meta["ranks"][0]["warmup_step_numbers"] == []
    assert result.meta["ranks"][0]["steady_steps"] == 4


def test_find_period_on_steady_steps_of_a_600_step_run():
    """The search bound on a run's shape: 600 steps, 7 left out (warm-up 0-2, gpudiag's window 10-13), an
    evaluation at 199, 399, 599; the old bound (593 // 3 = 197) never reached 200."""
    numbers = np.array([s for s in range(600) if s > 2 and not 10 <= s <= 13], dtype=np.int64)
    slow = np.isin(numbers, [199, 399, 599])
    found = find_period(numbers, slow, Thresholds(), excess_ms=np.where(slow, 50.0, 0.0))
    assert (found["period"], found["offset"], found["occurrences"], found["slots"]) == (200, 199, 3, 3)
