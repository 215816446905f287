"""Steps that compiled after warm-up (issue 18): kept out of the steady figures and named on their own.

fixtures/runs/jax_recompile is a real CPU capture of examples/jax_recompile.py (fixtures/runs/PROVENANCE.md): a new
sequence length every 15 iterations makes jit compile `update` again in steps 8, 23, 38, 53, 68, 83 and 98."""

from __future__ import annotations

import json

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from parsers.events import read_event_tables
from tests.launch.launch_helpers import EXAMPLES
from tests.paths import FIXTURES

RUN = FIXTURES / "runs" / "jax_recompile"
COMPILE_STEPS = [8, 23, 38, 53, 68, 83, 98]


def recompile_line() -> int:
    lines = (EXAMPLES / "jax_recompile.py").read_text().splitlines()
    (number,) = [i for i, text in enumerate(lines, start=1) if "# RECOMPILE" in text]
    return number


@pytest.fixture(scope="module")
def result():
    return run_analyzer(step_budget, diagnose.load(RUN), Thresholds())


def test_the_compile_steps_are_kept_out_of_the_steady_figures(result):
    meta = result.meta["ranks"][0]
    assert meta["compile_step_numbers"] == COMPILE_STEPS
    assert meta["compile_steps_wall_ms"] == pytest.approx(1201.607, abs=0.01)
    assert meta["steady_steps"] == 102  # 112 step records less 3 warm-up and 7 that compiled
    # the median without them (with them it read 1.141 ms), and no "every 15 steps" period made of compiles
    assert result.summary["step_budget_step_ms"] == pytest.approx(1.102541, abs=1e-6)
    assert meta["period"] is None and not [f for f in result.findings if f.id == "step_budget.periodic"]
    assert not set(COMPILE_STEPS) & set(meta["slow_step_numbers"])
    assert meta["slow_steps"] == 19
    assert result.summary["step_budget_compile_steps"] == 7
    assert result.summary["step_budget_compile_ms"] == pytest.approx(1132.471, abs=0.01)


def test_the_compilation_finding_names_the_function_its_steps_and_line(result):
    (f,) = [f for f in result.findings if f.id == "step_budget.compilation"]
    assert f.severity == Severity.CRITICAL
    assert f.title == (
        "update (jit) compiled again in 7 steps after warm-up (steps 8, 23, 38, 53, 68, 83, …): 1.13 s in all, "
        f"162 ms each (jax_recompile.py:{recompile_line()}), 85.0 % of the run after warm-up"
    )
    assert f.cost_share == pytest.approx(1132.471 / (131.418 + 1201.607), abs=1e-4)
    location, *steps = f.subjects
    assert location.name.endswith(f"examples/jax_recompile.py:{recompile_line()}")
    assert location.figures["name"] == "jit(update)" and location.figures["calls"] == 7
    assert [int(s.name) for s in steps] == COMPILE_STEPS
    assert steps[0].figures["compile_ms"] == pytest.approx(174.880, abs=0.001)
    assert "pad batches to one length or to a few bucket sizes" in f.recommendation
    # JAX's tools, not torch's (a JAX run's advice named drop_last=True and TORCH_LOGS until stop 30)
    assert "jax_explain_cache_misses" in f.recommendation and "static_argnames" in f.recommendation
    assert "TORCH_LOGS" not in f.recommendation and "drop_last" not in f.recommendation
    assert any("7 steps after warm-up compiled" in n for n in result.meta["ranks"][0]["notes"])


def test_compiles_inside_the_warm_up_are_a_note_not_the_finding():
    """With 10 warm-up steps, step 8's compile (174.9 ms) is warm-up; the other six are the finding."""
    th = Thresholds().with_overrides({"steps": {"warmup_steps": 10}})
    result = run_analyzer(step_budget, diagnose.load(RUN), th)
    meta = result.meta["ranks"][0]
    assert meta["warmup_compile_ms"] == pytest.approx(174.880, abs=0.001)
    (note,) = [n for n in meta["notes"] if "was compilation (" in n]
    assert "175 ms was compilation (1 compile;" in note
    (f,) = [f for f in result.findings if f.id == "step_budget.compilation"]
    assert "compiled again in 6 steps after warm-up (steps 23, 38, 53, 68, 83, 98)" in f.title


def test_little_compilation_is_no_finding():
    th = Thresholds().with_overrides({"step_budget": {"compile_min_share": 0.9}})
    result = run_analyzer(step_budget, diagnose.load(RUN), th)
    assert not [f for f in result.findings if f.id == "step_budget.compilation"]
    assert result.meta["ranks"][0]["steady_steps"] == 102  # still kept out of the figures


def test_a_malformed_compilation_record_is_dropped_with_a_warning(tmp_path):
    """Fake: the fixture's events with a compilation record whose name is not text, and one without ms."""
    lines = (RUN / "events" / "rank0.jsonl").read_text().splitlines()
    lines.insert(3, json.dumps({"kind": "work", "what": "compilation", "step": 30, "ms": 9.0, "name": ["update"]}))
    lines.insert(4, json.dumps({"kind": "work", "what": "compilation", "step": 31, "name": "jit(update)"}))
    path = tmp_path / "rank0.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="work record not read"):
        tables = read_event_tables(path)
    assert tables.work["step"].tolist() == COMPILE_STEPS
    assert set(tables.work["name"]) == {"jit(update)"}
    warned = tables.steps.attrs["warnings"]
    assert "line 4: work record not read (name should be the compiled function's name" in warned[0]
    assert "line 5: work record not read (needs ms, found none)" in warned[1]
    assert len(tables.steps) == 112
