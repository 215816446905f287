"""Periodic slow steps named by light mode's work records (issue 18): checkpoint saving and evaluation, with the line.

The fixtures are real CPU captures of examples/periodic_work.py (fixtures/runs/PROVENANCE.md): after steps 19, 39,
59, 79 and 99 it calls torch.save (periodic_work.py:56) or runs an evaluation from model.eval() (line 59)."""

from __future__ import annotations

import json

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.thresholds import Thresholds
from parsers.events import WORK_SCHEMA, read_event_tables
from tests.launch.launch_helpers import EXAMPLES
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"


def line_of(marker: str) -> int:
    """The line of examples/periodic_work.py that carries ``marker`` (the fixtures were captured from it)."""
    lines = (EXAMPLES / "periodic_work.py").read_text().splitlines()
    (number,) = [i for i, text in enumerate(lines, start=1) if marker in text]
    return number


def periodic_of(run: str):
    result = run_analyzer(step_budget, diagnose.load(RUNS / run), Thresholds())
    (finding,) = [f for f in result.findings if f.id == "step_budget.periodic"]
    return result, finding


def test_the_example_lines_are_the_ones_the_fixtures_recorded():
    assert line_of("# WORK-CHECKPOINT") == 56 and "torch.save(" in (EXAMPLES / "periodic_work.py").read_text()
    assert line_of("# WORK-EVALUATION") == 59


def test_the_events_file_gives_a_typed_work_table():
    tables = read_event_tables(RUNS / "periodic_checkpoint" / "events" / "rank0.jsonl")
    work = tables.work
    assert list(work.columns) == list(WORK_SCHEMA.columns)
    assert work["step"].tolist() == [19, 39, 59, 79, 99]
    assert set(work["what"]) == {"checkpoint"}
    assert work["location"].str.endswith("examples/periodic_work.py:56").all()
    assert work["ms"].between(10.7, 20.6).all()  # 10.74-20.58 ms as captured
    # a file without work records gives the typed empty table
    empty = read_event_tables(RUNS / "loop_epochs" / "events" / "rank0.jsonl").work
    assert len(empty) == 0 and list(empty.columns) == list(WORK_SCHEMA.columns)


def test_a_checkpoint_every_20_steps_is_named_with_its_line_and_time():
    result, periodic = periodic_of("periodic_checkpoint")
    period = result.meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["steps"]) == (20, 19, [19, 39, 59, 79])
    assert period["excess_ms"] == pytest.approx(18.69, abs=0.01)
    (work,) = period["work"]
    assert work["what"] == "checkpoint" and work["steps"] == [19, 39, 59, 79]
    assert work["ms"] == pytest.approx(15.92, abs=0.01)  # median of 14.48, 10.74, 17.36, 18.28 ms
    assert periodic.title.startswith("Every 20 steps (step 19 + 20i: steps 19, 39, 59, 79) a step is 18.7 ms slower")
    assert periodic.title.endswith(": checkpoint saving, torch.save at periodic_work.py:56 takes 15.9 ms")
    assert "async_save" in periodic.recommendation and "save less often" in periodic.recommendation
    assert "periodic_work.py:56" in periodic.recommendation
    location = periodic.subjects[0]
    assert location.kind == "location" and location.name.endswith("examples/periodic_work.py:56")
    assert location.figures["calls"] == 4
    assert {e.metric: e.value for e in periodic.evidence}["step_budget_period_checkpoint_ms"] == pytest.approx(
        15.92, 1e-3
    )


def test_an_evaluation_every_20_steps_is_named_with_the_eval_line():
    result, periodic = periodic_of("periodic_evaluation")
    period = result.meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["steps"]) == (20, 19, [19, 39, 59, 79])
    assert period["excess_ms"] == pytest.approx(20.23, abs=0.01)
    (work,) = period["work"]
    assert work["what"] == "evaluation" and work["ms"] == pytest.approx(18.07, abs=0.01)
    assert periodic.title.endswith(": evaluation (model.eval() at periodic_work.py:59) takes 18.1 ms")
    assert "evaluate less often" in periodic.recommendation and "torch.no_grad()" in periodic.recommendation
    assert periodic.subjects[0].name.endswith("examples/periodic_work.py:59")


def test_a_cold_first_evaluation_on_the_gpu_is_named_apart_from_the_period():
    """H100 capture: the first evaluation took 30 ms (cuBLAS set up for its shapes), the later ones 3.5 ms; the title
    names the four steps by their work, the median excess and step 19's own (fixtures/runs/PROVENANCE.md)."""
    result, periodic = periodic_of("periodic_evaluation_h100")
    period = result.meta["ranks"][0]["period"]
    assert period["by_work"] and period["steps"] == [19, 39, 59, 79] and period["period"] == 20
    assert period["excess_ms"] == pytest.approx(2.13, abs=0.01)
    assert period["largest"][0] == 19 and period["largest"][1] == pytest.approx(28.84, abs=0.01)
    assert periodic.title == (
        "Steps 19, 39, 59, 79 (4 steps, about every 20 steps) are 2.13 ms slower than the median 1.49 ms (step 19: "
        "28.8 ms slower): evaluation (model.eval() at periodic_work.py:59) takes 2.03 ms"
    )
    evidence = {e.metric: e.value for e in periodic.evidence}
    assert evidence["step_budget_period_largest_excess_ms"] == pytest.approx(28.84, abs=0.01)
    # the CPU capture's four evaluations are alike: no step named apart
    _, cpu = periodic_of("periodic_evaluation")
    assert "slower)" not in cpu.title


def test_work_that_explains_too_little_of_the_excess_is_not_named():
    """Raised above the evaluation's share of the excess (18.07 / 20.23 = 0.89), it falls back to the candidates."""
    th = Thresholds().with_overrides({"step_budget": {"period_work_share": 0.95}})
    result = run_analyzer(step_budget, diagnose.load(RUNS / "periodic_evaluation"), th)
    (periodic,) = [f for f in result.findings if f.id == "step_budget.periodic"]
    assert result.meta["ranks"][0]["period"]["work"] == []
    assert "model.eval()" not in periodic.title
    assert periodic.recommendation.startswith("Something runs every 20 steps: evaluation, checkpoint saving")


def test_an_epoch_stall_keeps_its_input_wait_wording():
    _, periodic = periodic_of("loop_epochs")
    assert "waiting 305 ms for input" in periodic.title and "torch.save" not in periodic.title


def test_a_malformed_work_record_is_dropped_with_a_warning_not_a_traceback(tmp_path):
    """Fake: the checkpoint fixture's events with two broken work records added (no ms; a step that is text)."""
    lines = (RUNS / "periodic_checkpoint" / "events" / "rank0.jsonl").read_text().splitlines()
    lines.insert(5, json.dumps({"kind": "work", "what": "checkpoint", "rank": 0, "step": 20, "location": "x.py:1"}))
    lines.insert(6, json.dumps({"kind": "work", "what": "evaluation", "step": "soon", "ms": 3.0}))
    path = tmp_path / "rank0.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="work record not read"):
        tables = read_event_tables(path)
    assert tables.work["step"].tolist() == [19, 39, 59, 79, 99]
    warned = tables.steps.attrs["warnings"]
    assert len(warned) == 2
    assert "line 6: work record not read (needs ms, found none)" in warned[0]
    assert "line 7: work record not read (step should be a number, found 'soon')" in warned[1]
    assert len(tables.steps) == 99  # the step timings are untouched
